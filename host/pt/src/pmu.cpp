#include "kthost/pt/pmu.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "kthost/common/fd.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"

namespace kt {
namespace {

Error bad_file(const std::string& path, const std::string& why) {
  return Error(ErrorCode::InvalidInput, path + ": " + why);
}

// Printable, length-capped text for error messages about untrusted content.
std::string quoted(std::string_view text) { return "\"" + sanitize_name(text, 64) + "\""; }

std::optional<unsigned> parse_bit(std::string_view text) {
  auto v = parse_u64(text, 10);
  if (!v || *v > 63) return std::nullopt;
  return static_cast<unsigned>(*v);
}

// Names of the regular entries in a directory, sorted, bounded.
Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return io_error("opendir " + path, errno);
  std::vector<std::string> names;
  Status status;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (names.size() >= PtPmu::kMaxEntries) {
      status = Error(ErrorCode::LimitExceeded,
                     path + ": more than " + std::to_string(PtPmu::kMaxEntries) + " entries");
      break;
    }
    names.push_back(std::move(name));
  }
  ::closedir(dir);
  if (!status) return status.take_error();
  std::sort(names.begin(), names.end());
  return names;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_small(const std::string& path) {
  auto text = read_file(path, PtPmu::kMaxFileBytes);
  if (!text) return text.take_error();
  return std::string(trim(*text));
}

}  // namespace

const char* config_word_name(ConfigWord word) {
  switch (word) {
    case ConfigWord::Config: return "config";
    case ConfigWord::Config1: return "config1";
    case ConfigWord::Config2: return "config2";
  }
  return "?";
}

unsigned PmuFormatField::width() const {
  unsigned total = 0;
  for (const auto& r : ranges) total += r.width();
  return total;
}

uint64_t PmuFormatField::max_value() const {
  unsigned w = width();
  return w >= 64 ? ~0ull : (1ull << w) - 1;
}

Status PmuFormatField::place(uint64_t value, uint64_t& word_value) const {
  if (value > max_value())
    return Error(ErrorCode::InvalidArgument, "value " + std::to_string(value) + " does not fit format field " +
                                                 name + " (" + std::to_string(width()) + " bits)");
  for (const auto& r : ranges) {
    uint64_t mask = r.width() >= 64 ? ~0ull : (1ull << r.width()) - 1;
    word_value |= (value & mask) << r.low;
    value = r.width() >= 64 ? 0 : value >> r.width();
  }
  return ok_status();
}

Result<PmuFormatField> parse_format_spec(std::string_view name, std::string_view text) {
  std::string what = "format " + sanitize_name(name, 64);
  text = trim(text);
  size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    return Error(ErrorCode::InvalidInput, what + ": expected WORD:BITS, got " + quoted(text));
  PmuFormatField field;
  field.name = std::string(name);
  std::string_view word = text.substr(0, colon);
  if (word == "config") field.word = ConfigWord::Config;
  else if (word == "config1") field.word = ConfigWord::Config1;
  else if (word == "config2") field.word = ConfigWord::Config2;
  else return Error(ErrorCode::InvalidInput, what + ": unknown config word " + quoted(word));
  uint64_t used = 0;
  for (auto part : split(text.substr(colon + 1), ',')) {
    size_t dash = part.find('-');
    auto low = parse_bit(part.substr(0, dash));
    auto high = dash == std::string_view::npos ? low : parse_bit(part.substr(dash + 1));
    if (!low || !high || *high < *low)
      return Error(ErrorCode::InvalidInput, what + ": bad bit range " + quoted(part) + " (bits are 0..63, low-high)");
    BitRange range{*low, *high};
    uint64_t mask = (range.width() >= 64 ? ~0ull : (1ull << range.width()) - 1) << range.low;
    if (used & mask) return Error(ErrorCode::InvalidInput, what + ": bit range " + quoted(part) + " overlaps another");
    used |= mask;
    field.ranges.push_back(range);
  }
  if (field.ranges.empty()) return Error(ErrorCode::InvalidInput, what + ": no bits after the colon");
  return field;
}

Result<uint32_t> parse_cap_value(std::string_view text) {
  text = trim(text);
  if (text.empty()) return Error(ErrorCode::InvalidInput, "empty capability value");
  if (starts_with(text, "0x") || starts_with(text, "0X"))
    return Error(ErrorCode::InvalidInput, "capability " + quoted(text) + ": expected bare hex as the kernel prints it");
  auto v = parse_u64(text, 16);
  if (!v) return Error(ErrorCode::InvalidInput, "capability " + quoted(text) + " is not hex");
  if (*v > 0xffffffffull)
    return Error(ErrorCode::InvalidInput, "capability " + quoted(text) + " is wider than the 32-bit CPUID register it comes from");
  return static_cast<uint32_t>(*v);
}

Result<PtPmu> PtPmu::load(const std::string& pmu_dir) {
  if (!is_dir(pmu_dir))
    return Error(ErrorCode::Unsupported,
                 "intel_pt PMU absent: " + pmu_dir +
                     " does not exist (needs an Intel CPU with Intel PT and a kernel with CONFIG_PERF_EVENTS_INTEL_PT)");
  PtPmu pmu;
  pmu.dir = pmu_dir;

  std::string type_path = pmu_dir + "/type";
  KT_ASSIGN_OR_RETURN(std::string type_text, read_small(type_path));
  auto type = parse_u64(type_text, 10);
  if (!type || *type > 0xffffffffull)
    return bad_file(type_path, "expected a decimal perf PMU type, got " + quoted(type_text));
  pmu.type = static_cast<uint32_t>(*type);

  std::string format_dir = pmu_dir + "/format";
  KT_ASSIGN_OR_RETURN(auto format_names, list_dir(format_dir));
  for (const auto& name : format_names) {
    std::string path = format_dir + "/" + name;
    if (!is_regular(path)) continue;
    KT_ASSIGN_OR_RETURN(std::string text, read_small(path));
    auto field = parse_format_spec(name, text);
    if (!field) return bad_file(path, field.error().message);
    pmu.formats.emplace(name, std::move(*field));
  }

  std::string caps_dir = pmu_dir + "/caps";
  KT_ASSIGN_OR_RETURN(auto cap_names, list_dir(caps_dir));
  for (const auto& name : cap_names) {
    std::string path = caps_dir + "/" + name;
    if (!is_regular(path)) continue;
    KT_ASSIGN_OR_RETURN(std::string text, read_small(path));
    auto value = parse_cap_value(text);
    if (!value) return bad_file(path, value.error().message);
    pmu.caps.emplace(name, *value);
  }

  std::string ratio_path = pmu_dir + "/max_nonturbo_ratio";
  if (is_regular(ratio_path)) {
    KT_ASSIGN_OR_RETURN(std::string text, read_small(ratio_path));
    auto v = parse_u64(text, 10);
    if (!v || *v > 0xffffffffull) return bad_file(ratio_path, "expected a decimal ratio, got " + quoted(text));
    pmu.max_nonturbo_ratio = static_cast<uint32_t>(*v);
  }
  std::string art_path = pmu_dir + "/tsc_art_ratio";
  if (is_regular(art_path)) {
    KT_ASSIGN_OR_RETURN(std::string text, read_small(art_path));
    auto parts = split(text, ':');
    std::optional<uint64_t> num, den;
    if (parts.size() == 2) num = parse_u64(parts[0], 10), den = parse_u64(parts[1], 10);
    if (!num || !den || *num > 0xffffffffull || *den > 0xffffffffull)
      return bad_file(art_path, "expected NUM:DEN in decimal, got " + quoted(text));
    pmu.tsc_art_ratio = std::make_pair(static_cast<uint32_t>(*num), static_cast<uint32_t>(*den));
  }
  return pmu;
}

const PmuFormatField* PtPmu::format(const std::string& name) const {
  auto it = formats.find(name);
  return it == formats.end() ? nullptr : &it->second;
}

uint32_t PtPmu::cap(const std::string& name) const {
  auto it = caps.find(name);
  return it == caps.end() ? 0 : it->second;
}

}  // namespace kt
