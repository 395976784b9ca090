// Reports from a decoded profile: per-function tables, the call graph, folded
// stacks and a flame graph SVG, coverage, the instruction trace, and the
// summary that `kthost diff` compares. Text for people, JSON for machines.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/symbolizer.h"

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

// Terminal tables.
std::string format_report_text(const Profile& profile, const Symbolizer& symbols, const ReportOptions& options);
// One JSON document (the summary's functions always; call graph and coverage when asked).
std::string format_report_json(const Profile& profile, const Symbolizer& symbols, const ReportOptions& options,
                               const std::map<std::string, uint64_t>& losses);

// "root;caller;callee count" lines, sorted (Brendan Gregg's folded format).
std::string folded_stacks(const Profile& profile, const Symbolizer& symbols);
// A flame graph of the folded stacks: a standalone SVG (no script needed to view).
std::string flamegraph_svg(const Profile& profile, const Symbolizer& symbols, const std::string& title);

// perf script --itrace style lines.
std::string format_trace(const std::vector<TraceLine>& lines, const Symbolizer& symbols);

// kthost diff.
struct DiffOptions {
  double threshold_pct = 10.0;  // an instruction-count change beyond this is a difference
  uint64_t min_insns = 0;       // ignore functions below this in both traces
};
struct FunctionChange {
  std::string name;
  uint64_t before = 0, after = 0;
  double change_pct = 0;  // +inf for new
};
struct DiffResult {
  std::vector<std::string> new_functions, gone_functions;
  std::vector<FunctionChange> changed;  // beyond the threshold
  uint64_t functions_before = 0, functions_after = 0, blocks_before = 0, blocks_after = 0;
  uint64_t insns_before = 0, insns_after = 0;
  bool differs() const { return !new_functions.empty() || !gone_functions.empty() || !changed.empty(); }
};
DiffResult diff_summaries(const ProfileSummary& a, const ProfileSummary& b, const DiffOptions& options);
std::string format_diff_text(const DiffResult& d, const DiffOptions& options);
std::string format_diff_json(const DiffResult& d, const DiffOptions& options);
// Reads the summary back from `kthost report --json` output.
// Errors: InvalidInput naming `name`.
Result<ProfileSummary> parse_report_json(const std::string& text, const std::string& name);

}  // namespace kt
