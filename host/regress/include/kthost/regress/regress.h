// Regressions between two kernels, from several traced runs of the same
// workload on each ("run sets"). Exact instruction counts vary between runs
// of one kernel (timers, scheduling, the guest's own background work), so a
// function is reported as changed only when the new runs sit outside the
// base runs' spread by a margin: the noise model below.
//
// Functions are matched across kernels by name: GCC's ".constprop.N",
// ".isra.N" and ".cold" suffixes are dropped (several variants of one
// function add up), module functions keep their "[module]", BPF programs
// their "bpf_prog_TAG_NAME". Addresses never matter: KASLR moves them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kthost/decode/report.h"
#include "kthost/flame/flame.h"

namespace kt {

// "foo.isra.0.cold" -> "foo"; "bar [mod]" keeps its module.
std::string normalize_function_name(const std::string& key);
// Each frame of each stack normalised; stacks that become equal add up.
FoldedStacks normalize_stacks(const FoldedStacks& stacks);

// One traced run: what the report says, its stacks, and what it lost.
struct TracedRun {
  std::string name;                     // where it came from (a bundle path)
  ProfileSummary summary;
  FoldedStacks stacks;                  // empty when the input had none
  std::map<std::string, uint64_t> losses;  // the bundle's losses.json, non-zero ones
};

// A function's counts over the runs of one set (a run without it counts 0).
struct Spread {
  double mean = 0, min = 0, max = 0;
  uint32_t present = 0;  // runs that executed it
  double range() const { return max - min; }
};

// One run's health, as the summary lists it.
struct RunHealth {
  std::string name;
  uint64_t insns = 0, decode_errors = 0, losses = 0;
};

struct RunSetStats {
  uint32_t runs = 0;
  std::vector<RunHealth> health;                 // per run, in order
  Spread total;                                  // all instructions
  std::map<std::string, Spread> self;            // instructions in the function itself
  std::map<std::string, Spread> inclusive;       // ... and in everything it called (from the stacks)
  std::map<std::string, Spread> calls;
  FoldedStacks stacks;                           // summed over the runs
  bool have_stacks = false;                      // every run had stacks
  uint64_t decode_errors = 0, losses = 0;        // summed over the runs
  std::map<std::string, uint64_t> error_kinds, loss_kinds;
};
RunSetStats summarize_runs(const std::vector<TracedRun>& runs);

struct NoiseModel {
  double threshold_pct = 10.0;   // a change must also exceed this share of the base mean
  double spread_factor = 2.0;    // ... and this many times the larger of the two sets' spreads
  double min_share_ppm = 1000.0;  // ... and this share (per million) of the base total instructions
  uint64_t min_insns = 1000;     // ... and this many instructions
};

enum class ChangeKind { Grew, Shrank, New, Vanished };
const char* change_kind_name(ChangeKind k);

struct FunctionDelta {
  std::string name;
  ChangeKind kind = ChangeKind::Grew;
  Spread base, next;
  double margin = 0;  // what |next.mean - base.mean| had to exceed
  double factor() const { return base.mean > 0 ? next.mean / base.mean : 0; }
  // |change| / margin: over 1 is flagged.
  double margin_used() const { return margin > 0 ? (next.mean > base.mean ? next.mean - base.mean : base.mean - next.mean) / margin : 0; }
};

struct RegressionLimits {
  double max_errors_per_million = 1.0;  // decode errors per million decoded instructions, per run
  uint64_t max_losses = 0;              // lost records/holds/streams per run
};

struct RegressionResult {
  NoiseModel model;
  RegressionLimits limits;
  RunSetStats base, next;
  std::vector<FunctionDelta> self;       // significant changes of a function's own instructions
  std::vector<FunctionDelta> inclusive;  // significant changes including callees (stacks needed)
  // The unflagged own-instruction changes that came closest to their margin
  // (|change| / margin, highest first, at most 10): how much headroom the
  // verdict had. Their kind says the direction.
  std::vector<FunctionDelta> nearest;
  size_t functions_compared = 0;
  std::vector<std::string> run_problems;  // runs over the error or loss limits: an error, not a verdict
  bool regressed() const;                 // something grew or is newly executed
  bool improved() const;                  // something shrank or vanished
  // 0 no regression, 1 regression, 2 a run is over the limits.
  int exit_status() const;
};
RegressionResult compare_run_sets(const std::vector<TracedRun>& base, const std::vector<TracedRun>& next, const NoiseModel& model,
                                  const RegressionLimits& limits);

// The outputs a CI job keeps. `top` bounds the tables in Markdown.
std::string regression_json(const RegressionResult& r);
std::string regression_markdown(const RegressionResult& r, const std::string& base_label,
                                const std::string& next_label, size_t top = 20);
// JUnit XML: one testcase per run-health check and one per function that
// changed significantly or that the caller watches (`watch`).
std::string regression_junit(const RegressionResult& r, const std::vector<std::string>& watch);

}  // namespace kt
