// PROTOCOL.md against ktproto_schema.h: every message's heading (name, type
// number, sender) and field table (names, wire types, order), the type range
// in the frame table and the limits table must say what the schema says. The
// doc is parsed here as text; the expectations are expanded from the schema's
// X-macro tables, so the two can only agree by being the same.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ktproto.h"

namespace {

using Row = std::pair<std::string, std::string>;  // field, type as the doc writes them

struct SchemaMessage {
  std::string name;
  unsigned number;
  std::string sender;  // GUEST, HOST or EITHER
  std::vector<Row> rows;
};

// The wire form of a record, flattened as the doc's tables write it.
std::vector<Row> record_rows(const std::string& record) {
  std::vector<Row> rows;
#define KT_ROW(kind, n, a) rows.push_back({#n, kind_name(#kind)});
  auto kind_name = [](std::string k) {
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return k;
  };
  if (record == "clock") { KTP_RECORD_clock(KT_ROW) }
  if (record == "symbol") { KTP_RECORD_symbol(KT_ROW) }
#undef KT_ROW
  return rows;
}

void add_field(std::vector<Row>* rows, const std::string& kind, const std::string& name) {
  if (kind == "CLOCK") {
    for (const Row& r : record_rows("clock")) rows->push_back(r);
  } else if (kind == "SYMBOLS") {
    rows->push_back({"count", "u32"});
    rows->push_back({"entries", "count times:"});
    for (const Row& r : record_rows("symbol")) rows->push_back({"." + r.first, r.second});
  } else if (kind == "U32S") {
    rows->push_back({"count", "u32"});
    rows->push_back({name, "count times u32"});
  } else {
    std::string lower = kind;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    rows->push_back({name, lower});
  }
}

std::map<std::string, std::vector<Row>> payload_rows() {
  std::map<std::string, std::vector<Row>> out;
#define KT_FIELD(kind, n, a) add_field(&rows, #kind, #n);
#define KT_PAYLOAD(p)           \
  {                             \
    std::vector<Row> rows;      \
    KTP_PAYLOAD_##p(KT_FIELD)   \
    out[#p] = std::move(rows);  \
  }
  KTP_PAYLOADS(KT_PAYLOAD)
#undef KT_PAYLOAD
#undef KT_FIELD
  return out;
}

std::vector<SchemaMessage> schema_messages() {
  const auto payloads = payload_rows();
  std::vector<SchemaMessage> out;
#define KT_MESSAGE(NAME, num, fn, p, sender) out.push_back({#NAME, num, #sender, payloads.at(#p)});
  KTP_MESSAGES(KT_MESSAGE)
#undef KT_MESSAGE
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t`");
  const auto e = s.find_last_not_of(" \t`");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line.substr(1));
  std::string c;
  while (std::getline(ss, c, '|')) out.push_back(trim(c));
  return out;
}

struct DocMessage {
  std::string sender;  // "" when the heading names none
  std::vector<Row> rows;
  std::string same_as;  // "The same payload as NAME."
};

// Everything PROTOCOL.md says that the schema also says; problems, one per line.
std::vector<std::string> doc_mismatches(const std::string& doc) {
  std::vector<std::string> problems;
  std::map<std::string, std::pair<unsigned, DocMessage>> found;  // by name
  std::vector<std::string> current;                              // names of the section being read
  bool in_messages = false;
  std::map<std::string, std::string> limits;
  std::string type_range;
  std::istringstream in(doc);
  std::string line;
  const std::regex heading(R"(^### (.*)$)");
  const std::regex one(R"(([A-Z_]+) \((\d+)\))");
  const std::regex same(R"(The same payload as ([A-Z_]+))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("## ", 0) == 0) {
      in_messages = line == "## Messages";
      current.clear();
      continue;
    }
    if (std::regex_match(line, m, heading)) {
      current.clear();
      if (!in_messages) continue;
      const std::string h = m[1];
      std::string sender;
      if (h.find("guest to host") != std::string::npos) sender = "GUEST";
      if (h.find("host to guest") != std::string::npos) sender = "HOST";
      if (h.find("either way") != std::string::npos) sender = "EITHER";
      for (std::sregex_iterator it(h.begin(), h.end(), one), end; it != end; ++it) {
        const std::string name = (*it)[1];
        if (found.count(name)) problems.push_back(name + ": described twice");
        found[name] = {static_cast<unsigned>(std::stoul((*it)[2])), DocMessage{sender, {}, ""}};
        current.push_back(name);
      }
      continue;
    }
    if (std::regex_search(line, m, same))
      for (const auto& name : current) found[name].second.same_as = m[1];
    if (line.rfind("|", 0) != 0) continue;
    const auto c = cells(line);
    if (c.size() < 2) continue;
    if (c[0] == "field" || c[0].find("---") == 0 || (c[0] == "name" && c[1] == "encoding") || c[0] == "limit" || c[0] == "offset") continue;
    if (in_messages) {
      for (const auto& name : current) found[name].second.rows.push_back({c[0], c[1]});
    } else if (c.size() >= 3 && c[2] == "type") {
      type_range = c[3 < c.size() ? 3 : 2];
    } else {
      limits[c[0]] = c[1];
    }
  }

  std::set<std::string> in_schema;
  for (const SchemaMessage& s : schema_messages()) {
    in_schema.insert(s.name);
    auto it = found.find(s.name);
    if (it == found.end()) {
      problems.push_back(s.name + ": in the schema, not in PROTOCOL.md");
      continue;
    }
    const auto& [number, d] = it->second;
    if (number != s.number)
      problems.push_back(s.name + ": PROTOCOL.md says type " + std::to_string(number) + ", the schema " +
                         std::to_string(s.number));
    if (!d.sender.empty() ? d.sender != s.sender : s.sender != "GUEST")
      problems.push_back(s.name + ": PROTOCOL.md says sender '" + (d.sender.empty() ? "guest (unstated)" : d.sender) +
                         "', the schema " + s.sender);
    std::vector<Row> rows = d.rows;
    if (!d.same_as.empty() && rows.empty() && found.count(d.same_as)) rows = found[d.same_as].second.rows;
    if (rows != s.rows) {
      std::string want, got;
      for (const Row& r : s.rows) want += " " + r.first + ":" + r.second;
      for (const Row& r : rows) got += " " + r.first + ":" + r.second;
      problems.push_back(s.name + ": fields differ\n  schema:     " + want + "\n  PROTOCOL.md:" + got);
    }
  }
  for (const auto& [name, _] : found)
    if (!in_schema.count(name)) problems.push_back(name + ": in PROTOCOL.md, not in the schema");

  const std::string range = "1.." + std::to_string(KTP_TYPE_MAX);
  if (type_range.find(range) == std::string::npos)
    problems.push_back("frame table: type says '" + type_range + "', the schema has " + range);
  const std::map<std::string, unsigned> want_limits = {{"str length", KTP_MAX_STRING},
                                                       {"blob length", KTP_MAX_BLOB},
                                                       {"symbols per STATE_SYMBOLS", KTP_MAX_BATCH},
                                                       {"CPUs in STATE_CPUS", KTP_MAX_CPUS}};
  for (const auto& [what, value] : want_limits)
    if (limits[what] != std::to_string(value))
      problems.push_back("limits: '" + what + "' is '" + limits[what] + "', ktproto.h says " + std::to_string(value));
  if (limits["payload length"].rfind(std::to_string(KTP_MAX_PAYLOAD) + " bytes", 0) != 0)
    problems.push_back("limits: payload length is '" + limits["payload length"] + "'");
  return problems;
}

std::string read_doc() {
  std::ifstream f(KT_SOURCE_DIR "/guest-kit/proto/PROTOCOL.md");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += p + "\n";
  return s;
}

TEST(ProtocolDoc, SaysWhatTheSchemaSays) {
  const std::string doc = read_doc();
  ASSERT_GT(doc.size(), 1000u) << "cannot read PROTOCOL.md";
  const auto problems = doc_mismatches(doc);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

// The check can fail: each of these edits of the real doc is caught.
TEST(ProtocolDoc, CatchesEachKindOfDifference) {
  const std::string doc = read_doc();
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string d = doc;
    const auto at = d.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) d.replace(at, from.size(), to);
    return doc_mismatches(d);
  };
  // Two fields swapped.
  EXPECT_FALSE(edited("| time | u64 | record time |\n| cpu | u32 | CPU that read the record |",
                      "| cpu | u32 | CPU that read the record |\n| time | u64 | record time |")
                   .empty());
  // A field's type.
  EXPECT_FALSE(edited("| jited_len | u32 |", "| jited_len | u64 |").empty());
  // A type number, and a message dropped.
  EXPECT_FALSE(edited("### LOST (14)", "### LOST (41)").empty());
  EXPECT_FALSE(edited("### LOST (14)", "### Lost frames").empty());
  // The sender.
  EXPECT_FALSE(edited("### GUARD_ACK (16), host to guest", "### GUARD_ACK (16)").empty());
  // A limit.
  EXPECT_FALSE(edited("| blob length | 256 |", "| blob length | 255 |").empty());
}

TEST(ProtocolSchema, TypesRunFromOneWithoutGapsAndEachHasANameAndSender) {
  std::set<unsigned> numbers;
  std::set<std::string> names;
#define KT_CHECK(NAME, num, fn, p, sender)                                   \
  EXPECT_TRUE(numbers.insert(num).second) << #NAME;                          \
  EXPECT_TRUE(names.insert(#NAME).second) << #NAME;                          \
  EXPECT_STREQ(ktp_type_name(num), #NAME);                                   \
  EXPECT_EQ(ktp_type_sender(num), KTP_SENDER_##sender) << #NAME;
  KTP_MESSAGES(KT_CHECK)
#undef KT_CHECK
  ASSERT_EQ(numbers.size(), static_cast<size_t>(KTP_TYPE_MAX));
  EXPECT_EQ(*numbers.begin(), 1u);
  EXPECT_EQ(*numbers.rbegin(), static_cast<unsigned>(KTP_TYPE_MAX));
  EXPECT_EQ(ktp_type_name(0), nullptr);
  EXPECT_EQ(ktp_type_name(KTP_TYPE_MAX + 1), nullptr);
  EXPECT_EQ(ktp_type_sender(KTP_TYPE_MAX + 1), 0);
}

}  // namespace
