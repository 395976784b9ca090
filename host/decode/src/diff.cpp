// kthost diff: two profile summaries compared by function name.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "kthost/decode/report.h"

namespace kt {

DiffResult diff_summaries(const ProfileSummary& a, const ProfileSummary& b, const DiffOptions& o) {
  DiffResult d;
  d.functions_before = a.functions.size();
  d.functions_after = b.functions.size();
  d.blocks_before = a.blocks_covered;
  d.blocks_after = b.blocks_covered;
  d.insns_before = a.insns;
  d.insns_after = b.insns;
  for (const auto& [name, f] : b.functions)
    if (!a.functions.count(name) && f.insns >= o.min_insns) d.new_functions.push_back(name);
  for (const auto& [name, f] : a.functions)
    if (!b.functions.count(name) && f.insns >= o.min_insns) d.gone_functions.push_back(name);
  for (const auto& [name, fa] : a.functions) {
    auto it = b.functions.find(name);
    if (it == b.functions.end()) continue;
    uint64_t x = fa.insns, y = it->second.insns;
    if (std::max(x, y) < o.min_insns || x == y) continue;
    double change = x ? 100.0 * (static_cast<double>(y) - static_cast<double>(x)) / static_cast<double>(x)
                      : std::numeric_limits<double>::infinity();
    if (std::fabs(change) > o.threshold_pct) d.changed.push_back({name, x, y, change});
  }
  std::stable_sort(d.changed.begin(), d.changed.end(),
                   [](const FunctionChange& p, const FunctionChange& q) { return std::fabs(p.change_pct) > std::fabs(q.change_pct); });
  return d;
}

std::string format_diff_text(const DiffResult& d, const DiffOptions& o) {
  std::string out;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "instructions %" PRIu64 " -> %" PRIu64 "\ncoverage: functions %" PRIu64 " -> %" PRIu64
                " (%+" PRId64 "), blocks %" PRIu64 " -> %" PRIu64 " (%+" PRId64 ")\n",
                d.insns_before, d.insns_after, d.functions_before, d.functions_after,
                static_cast<int64_t>(d.functions_after - d.functions_before), d.blocks_before, d.blocks_after,
                static_cast<int64_t>(d.blocks_after - d.blocks_before));
  out += buf;
  out += "newly executed: " + std::to_string(d.new_functions.size()) + "\n";
  for (const auto& n : d.new_functions) out += "  + " + n + "\n";
  out += "no longer executed: " + std::to_string(d.gone_functions.size()) + "\n";
  for (const auto& n : d.gone_functions) out += "  - " + n + "\n";
  std::snprintf(buf, sizeof buf, "instruction counts changed by more than %.1f%%: %zu\n", o.threshold_pct,
                d.changed.size());
  out += buf;
  for (const auto& c : d.changed) {
    std::snprintf(buf, sizeof buf, "  %14" PRIu64 " -> %14" PRIu64 "  %+8.1f%%  %s\n", c.before, c.after, c.change_pct,
                  c.name.c_str());
    out += buf;
  }
  out += d.differs() ? "result: differences beyond the threshold\n" : "result: no differences beyond the threshold\n";
  return out;
}

std::string format_diff_json(const DiffResult& d, const DiffOptions& o) {
  nlohmann::json changed = nlohmann::json::array();
  for (const auto& c : d.changed)
    changed.push_back({{"name", c.name},
                       {"before", c.before},
                       {"after", c.after},
                       {"change_pct", std::isinf(c.change_pct) ? nlohmann::json("inf") : nlohmann::json(c.change_pct)}});
  nlohmann::json j = {
      {"format", "kthost-diff"},
      {"version", 1},
      {"threshold_pct", o.threshold_pct},
      {"differs", d.differs()},
      {"insns", {{"before", d.insns_before}, {"after", d.insns_after}}},
      {"coverage",
       {{"functions_before", d.functions_before},
        {"functions_after", d.functions_after},
        {"functions_change", static_cast<int64_t>(d.functions_after - d.functions_before)},
        {"blocks_before", d.blocks_before},
        {"blocks_after", d.blocks_after},
        {"blocks_change", static_cast<int64_t>(d.blocks_after - d.blocks_before)}}},
      {"new_functions", d.new_functions},
      {"gone_functions", d.gone_functions},
      {"changed", changed},
  };
  return j.dump(2) + "\n";
}

Result<ProfileSummary> parse_report_json(const std::string& text, const std::string& name) {
  auto bad = [&](const std::string& what) { return Error(ErrorCode::InvalidInput, name + ": " + what); };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not valid JSON");
  if (j.value("format", std::string()) != "kthost-report") return bad("not a kthost report (format)");
  ProfileSummary s;
  if (!j.contains("insns") || !j["insns"].is_number_unsigned()) return bad("missing \"insns\"");
  s.insns = j["insns"].get<uint64_t>();
  auto cov = j.find("coverage_summary");
  if (cov == j.end() || !cov->is_object() || !cov->contains("blocks") || !(*cov)["blocks"].is_number_unsigned())
    return bad("missing \"coverage_summary\"");
  s.blocks_covered = (*cov)["blocks"].get<uint64_t>();
  auto fns = j.find("functions");
  if (fns == j.end() || !fns->is_array()) return bad("missing \"functions\"");
  size_t i = 0;
  for (const auto& f : *fns) {
    if (!f.is_object() || !f.contains("key") || !f["key"].is_string() || !f.contains("insns") ||
        !f["insns"].is_number_unsigned())
      return bad("functions[" + std::to_string(i) + "]: missing key or insns");
    auto& fs = s.functions[f["key"].get<std::string>()];
    fs.insns += f["insns"].get<uint64_t>();
    if (f.contains("calls") && f["calls"].is_number_unsigned()) fs.calls += f["calls"].get<uint64_t>();
    if (f.contains("module") && f["module"].is_string()) fs.module = f["module"].get<std::string>();
    if (f.contains("blocks") && f["blocks"].is_number_unsigned()) fs.blocks += f["blocks"].get<uint64_t>();
    ++i;
  }
  return s;
}

}  // namespace kt
