// The intel_pt PMU as the kernel describes it in sysfs
// (/sys/bus/event_source/devices/intel_pt): its perf type, where each
// config field lives (format/*) and what this CPU supports (caps/*).
//
// Every file is untrusted text: it may come from a captured tree or a
// kernel newer than this code. Malformed files give InvalidInput errors
// that name the file; nothing is guessed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

// Which perf_event_attr word a format field lives in.
enum class ConfigWord { Config, Config1, Config2 };

const char* config_word_name(ConfigWord word);

struct BitRange {
  unsigned low = 0;   // inclusive, 0..63
  unsigned high = 0;  // inclusive, low..63
  unsigned width() const { return high - low + 1; }
};

// One format/<name> file: "config:14-17", "config2:0-31", "config:0-7,32-35".
// A value is spread over the ranges in order, lowest bits into the first range
// (the same rule perf uses).
struct PmuFormatField {
  std::string name;
  ConfigWord word = ConfigWord::Config;
  std::vector<BitRange> ranges;

  unsigned width() const;
  // The largest value the field can hold.
  uint64_t max_value() const;
  // Ors `value` into `word_value` at the field's bits. InvalidArgument when
  // the value does not fit the field's width.
  Status place(uint64_t value, uint64_t& word_value) const;
};

// Parses one format file's text. InvalidInput on anything but
// WORD:BITS[,BITS...] with BITS = N or N-M, 0 <= N <= M <= 63, no overlaps.
Result<PmuFormatField> parse_format_spec(std::string_view name, std::string_view text);

// Parses one caps file: the kernel prints "%x\n" (hex, no 0x). InvalidInput
// on empty text, non-hex digits, trailing garbage or more than 32 bits.
Result<uint32_t> parse_cap_value(std::string_view text);

struct PtPmu {
  static constexpr const char* kDefaultDir = "/sys/bus/event_source/devices/intel_pt";
  // Protects memory against a hostile tree.
  static constexpr size_t kMaxEntries = 256;
  static constexpr size_t kMaxFileBytes = 4096;

  std::string dir;
  uint32_t type = 0;                              // perf_event_attr.type
  std::map<std::string, PmuFormatField> formats;  // by file name
  std::map<std::string, uint32_t> caps;           // by file name, values as the kernel shifted them
  // Optional timing files, needed later to turn MTC/CYC into TSC time.
  std::optional<uint32_t> max_nonturbo_ratio;
  std::optional<std::pair<uint32_t, uint32_t>> tsc_art_ratio;  // numerator:denominator (CPUID 0x15 EBX:EAX)

  // Loads a PMU directory laid out like the kernel's. Errors:
  //   Unsupported   the directory does not exist (no intel_pt PMU here)
  //   Io            a file could not be read (message names it)
  //   InvalidInput  a file's content is malformed (message names it)
  //   LimitExceeded too many entries or a file too large
  static Result<PtPmu> load(const std::string& pmu_dir = kDefaultDir);

  const PmuFormatField* format(const std::string& name) const;
  // A capability's value, 0 when the file is absent (older kernels lack some).
  uint32_t cap(const std::string& name) const;
};

}  // namespace kt
