// The noise model: a function changed only when the new runs' mean moved
// further than every one of the model's margins from the base runs' mean.
#include <algorithm>
#include <cmath>

#include "kthost/regress/regress.h"

namespace kt {
namespace {

// The margin the change of mean must exceed.
double margin_for(const Spread& base, const Spread& next, const NoiseModel& m, double base_total) {
  double margin = m.threshold_pct / 100.0 * base.mean;
  margin = std::max(margin, m.spread_factor * std::max(base.range(), next.range()));
  margin = std::max(margin, m.min_share_ppm / 1e6 * base_total);
  margin = std::max(margin, static_cast<double>(m.min_insns));
  return margin;
}

std::vector<FunctionDelta> significant(const std::map<std::string, Spread>& base,
                                       const std::map<std::string, Spread>& next, uint32_t base_runs,
                                       uint32_t next_runs, const NoiseModel& m, double base_total, size_t* compared,
                                       std::vector<FunctionDelta>* nearest) {
  std::vector<FunctionDelta> out;
  std::vector<std::string> names;
  for (const auto& [k, v] : base) names.push_back(k);
  for (const auto& [k, v] : next)
    if (!base.count(k)) names.push_back(k);
  if (compared) *compared = names.size();
  for (const auto& name : names) {
    FunctionDelta d;
    d.name = name;
    if (auto it = base.find(name); it != base.end()) d.base = it->second;
    if (auto it = next.find(name); it != next.end()) d.next = it->second;
    d.margin = margin_for(d.base, d.next, m, base_total);
    const double change = d.next.mean - d.base.mean;
    if (std::fabs(change) <= d.margin) {
      if (nearest && change != 0) {
        d.kind = change > 0 ? ChangeKind::Grew : ChangeKind::Shrank;
        nearest->push_back(d);
      }
      continue;
    }
    // New or vanished only when absent from every run of the other side.
    if (d.base.present == 0 && d.next.present == next_runs) d.kind = ChangeKind::New;
    else if (d.next.present == 0 && d.base.present == base_runs) d.kind = ChangeKind::Vanished;
    else d.kind = change > 0 ? ChangeKind::Grew : ChangeKind::Shrank;
    out.push_back(d);
  }
  std::stable_sort(out.begin(), out.end(), [](const FunctionDelta& a, const FunctionDelta& b) {
    return std::fabs(a.next.mean - a.base.mean) > std::fabs(b.next.mean - b.base.mean);
  });
  if (nearest) {
    constexpr size_t kNearest = 10;
    std::stable_sort(nearest->begin(), nearest->end(), [](const FunctionDelta& a, const FunctionDelta& b) {
      return a.margin_used() > b.margin_used();
    });
    if (nearest->size() > kNearest) nearest->resize(kNearest);
  }
  return out;
}

void check_runs(const std::vector<TracedRun>& runs, const char* side, const RegressionLimits& l,
                std::vector<std::string>& problems) {
  for (const TracedRun& r : runs) {
    uint64_t errors = 0, losses = 0;
    for (const auto& [k, n] : r.summary.errors) errors += n;
    for (const auto& [k, n] : r.losses) losses += n;
    const double per_million = r.summary.insns ? 1e6 * static_cast<double>(errors) / static_cast<double>(r.summary.insns)
                                               : (errors ? INFINITY : 0.0);
    if (per_million > l.max_errors_per_million)
      problems.push_back(std::string(side) + " run " + r.name + ": " + std::to_string(errors) + " decode errors in " +
                         std::to_string(r.summary.insns) + " instructions (limit " +
                         std::to_string(l.max_errors_per_million) + " per million)");
    if (losses > l.max_losses)
      problems.push_back(std::string(side) + " run " + r.name + ": " + std::to_string(losses) +
                         " lost (limit " + std::to_string(l.max_losses) + ")");
    if (r.summary.insns == 0) problems.push_back(std::string(side) + " run " + r.name + ": no instructions decoded");
  }
}

}  // namespace

const char* change_kind_name(ChangeKind k) {
  switch (k) {
    case ChangeKind::Grew: return "grew";
    case ChangeKind::Shrank: return "shrank";
    case ChangeKind::New: return "new";
    case ChangeKind::Vanished: return "vanished";
  }
  return "?";
}

bool RegressionResult::regressed() const {
  for (const auto& d : self)
    if (d.kind == ChangeKind::Grew || d.kind == ChangeKind::New) return true;
  return false;
}

bool RegressionResult::improved() const {
  for (const auto& d : self)
    if (d.kind == ChangeKind::Shrank || d.kind == ChangeKind::Vanished) return true;
  return false;
}

int RegressionResult::exit_status() const {
  if (!run_problems.empty()) return 2;
  return regressed() ? 1 : 0;
}

RegressionResult compare_run_sets(const std::vector<TracedRun>& base, const std::vector<TracedRun>& next, const NoiseModel& model,
                                  const RegressionLimits& limits) {
  RegressionResult r;
  r.model = model;
  r.limits = limits;
  r.base = summarize_runs(base);
  r.next = summarize_runs(next);
  if (base.empty()) r.run_problems.push_back("no base runs");
  if (next.empty()) r.run_problems.push_back("no new runs");
  check_runs(base, "base", limits, r.run_problems);
  check_runs(next, "new", limits, r.run_problems);
  r.self = significant(r.base.self, r.next.self, r.base.runs, r.next.runs, model, r.base.total.mean,
                       &r.functions_compared, &r.nearest);
  if (r.base.have_stacks && r.next.have_stacks)
    r.inclusive = significant(r.base.inclusive, r.next.inclusive, r.base.runs, r.next.runs, model,
                              r.base.total.mean, nullptr, nullptr);
  return r;
}

}  // namespace kt
