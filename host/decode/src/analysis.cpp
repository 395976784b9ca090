#include "kthost/decode/analysis.h"

#include <algorithm>

namespace kt {

Result<Analysis> open_analysis(const std::string& bundle_dir, const std::string& vmlinux,
                               const BundleReadOptions& options) {
  Analysis a;
  KT_ASSIGN_OR_RETURN(a.bundle, read_bundle(bundle_dir, options));
  KT_ASSIGN_OR_RETURN(a.image, VersionedImage::from_bundle(a.bundle));
  KT_ASSIGN_OR_RETURN(a.symbols, Symbolizer::from_bundle(a.bundle));
  if (!vmlinux.empty()) KT_TRY(a.symbols.load_dwarf(vmlinux));
  a.task_switches = task_switch_log(a.bundle);
  return a;
}

uint64_t clock_uncertainty(const BundleClock& clock) {
  if (!clock.estimated || clock.time_mult == 0) return 0;
  constexpr uint64_t kNs = 300'000'000;  // 300 ms: twice the largest offset seen
  return (kNs << clock.time_shift) / clock.time_mult;  // ns -> PT ticks (time_shift <= 32: no overflow)
}

TaskSwitchLog task_switch_log(const Bundle& bundle) {
  TaskSwitchLog log;
  const BundleClock& clock = bundle.manifest.clock;
  for (const auto& e : bundle.events) {
    // perf's ring (per CPU) and ktguest's queue (any CPU) can drop switch records.
    if (e.kind == BundleEvent::Kind::Lost && e.count > 0 && (e.lost_kind == "perf-ring" || e.lost_kind == "queue"))
      log.losses.emplace_back(e.lost_kind == "perf-ring" ? e.cpu : UINT32_MAX, clock.to_pt(e.time));
    if (e.kind != BundleEvent::Kind::TaskSwitches) continue;
    auto& list = log.by_cpu[e.cpu];
    for (const auto& [t, tid] : e.switches) list.emplace_back(clock.to_pt(t), tid);
  }
  // Frames of one CPU arrive in order; a stable sort keeps equal times so.
  for (auto& [cpu, list] : log.by_cpu)
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return log;
}


}  // namespace kt
