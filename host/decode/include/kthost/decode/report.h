// Reports from a decoded profile: per-function tables, the call graph, folded
// stacks and a flame graph SVG, coverage, the instruction trace, and the
// summary that `kthost diff` compares (kt_regress). Text for people, JSON for machines.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/symbolizer.h"
#include "kthost/flame/flame.h"

namespace kt {

// Functions by name ("name" for the core kernel, "name [module]" otherwise);
// what two traces of different kernels can be compared by.
struct FunctionSummary {
  std::string module;
  uint64_t insns = 0, calls = 0, blocks = 0;
};
struct ProfileSummary {
  uint64_t insns = 0, blocks_covered = 0;
  std::map<std::string, FunctionSummary> functions;  // executed functions only
  std::map<std::string, uint64_t> errors;            // by kind
};
ProfileSummary summarize(const Profile& profile, const Symbolizer& symbols);
std::string function_key(const FunctionInfo& f);

struct ReportOptions {
  size_t top = 25;
  std::optional<uint32_t> cpu;  // per-function table for one CPU
  bool callgraph = false;
  bool coverage = false;
  std::string coverage_module;  // only this module's functions listed
};

// The coverage table alone (what --coverage adds), and the same as a JSON
// object by module: {"functions", "blocks", "insns", "names"}. They read only
// the profile's function instruction counts and blocks_seen.
std::string coverage_section(const Profile& profile, const Symbolizer& symbols, const ReportOptions& options);
std::string coverage_json(const Profile& profile, const Symbolizer& symbols, const ReportOptions& options);

// Terminal tables.
std::string format_report_text(const Profile& profile, const Symbolizer& symbols, const ReportOptions& options);
// One JSON document (the summary's functions always; call graph and coverage when asked).
std::string format_report_json(const Profile& profile, const Symbolizer& symbols, const ReportOptions& options,
                               const std::map<std::string, uint64_t>& losses);

// The profile's call stacks by function key, as kt_flame holds them.
FoldedStacks folded_stacks_of(const Profile& profile, const Symbolizer& symbols);
// "root;caller;callee count" lines, sorted (Brendan Gregg's folded format).
std::string folded_stacks(const Profile& profile, const Symbolizer& symbols);
// The interactive flame graph of the folded stacks (kt_flame's flame_svg).
std::string flamegraph_svg(const Profile& profile, const Symbolizer& symbols, const std::string& title);

// perf script --itrace style lines.
std::string format_trace(const std::vector<TraceLine>& lines, const Symbolizer& symbols);

// Reads the summary (functions, coverage, decode errors) back from `kthost
// report --json` output, and its non-zero losses into `losses` when given.
// Errors: InvalidInput naming `name` and the field.
Result<ProfileSummary> parse_report_json(const std::string& text, const std::string& name,
                                         std::map<std::string, uint64_t>* losses = nullptr);

}  // namespace kt
