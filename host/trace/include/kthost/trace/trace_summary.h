// TraceSummary: what a trace did and lost, as summary.json and as the one
// line `kthost trace` prints.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kthost/trace/guard_responder.h"
#include "kthost/trace/loss_counters.h"

namespace kt {

struct TraceSummary {
  double seconds = 0;
  std::string end_reason;
  bool guard = false;  // the host answers holds (kthost trace without --no-guard)
  // What the guest said of its guard (GUARD_STATE): "on", "absent: WHY",
  // "off: WHY"; "unknown" when it said nothing (a helper older than minor 1).
  std::string guest_guard = "unknown";
  // The freeing paths ktguard could not hook (GUARD_HOOKS), each as
  // "function (what it frees): how": their unloads were copied best effort.
  std::vector<std::string> guard_unheld;
  uint64_t events = 0, text_pokes = 0, ksymbols = 0, module_loads = 0, module_unloads = 0;
  HoldTotals holds;
  TextSaverStats saver;
  uint64_t text_records = 0, text_bytes = 0;
  LossCounters losses;
  std::string pt_source = "none";
  uint64_t pt_bytes = 0;
  nlohmann::json extra = nlohmann::json::object();  // PT per CPU, KVM TSC, lost unload examples

  nlohmann::json to_json() const;
  // One line for people, naming every non-zero loss.
  std::string one_line() const;
};

}  // namespace kt
