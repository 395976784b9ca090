#include "kthost/trace/trace_summary.h"

#include <cstdio>

#include "kthost/common/strings.h"

namespace kt {

nlohmann::json TraceSummary::to_json() const {
  nlohmann::json j = {
      {"seconds", seconds},
      {"end", end_reason},
      {"guard", guard},
      {"guest_guard", guest_guard},
      {"guard_unheld", guard_unheld},
      {"events", events},
      {"text_pokes", text_pokes},
      {"ksymbols", ksymbols},
      {"module_loads", module_loads},
      {"module_unloads", module_unloads},
      {"holds", holds.holds},
      {"holds_word_acked", saver.word_acks},
      {"holds_polled", holds.polled},
      {"holds_word_ack_failed", saver.word_ack_failed},
      {"hold_host_us_max", holds.host_us_max},
      {"hold_host_us_mean", holds.host_us_mean()},
      {"hold_lines_dropped", holds.lines_dropped},
      {"text_records", text_records},
      {"text_bytes", text_bytes},
      {"load_copies", saver.load_copies},
      {"load_failed", saver.load_failed},
      {"loads_from_guard", saver.loads_from_guard},
      {"unregister_copies", saver.unregister_copies},
      {"unloads_seen", saver.unloads_seen},
      {"store_errors", saver.store_errors},
      {"pt_source", pt_source},
      {"pt_bytes", pt_bytes},
  };
  j.update(losses.to_json());
  j.update(extra);
  return j;
}

std::string TraceSummary::one_line() const {
  char head[256];
  std::snprintf(head, sizeof head, "%.1f s, %lu events; %lu holds (host max %.0f us); %lu text records, %s; unloads %lu",
                seconds, static_cast<unsigned long>(events), static_cast<unsigned long>(holds.holds),
                holds.host_us_max, static_cast<unsigned long>(text_records), human_bytes(text_bytes).c_str(),
                static_cast<unsigned long>(saver.unloads_seen));
  std::string guard_note;
  if (guard && guest_guard != "on" && guest_guard != "unknown")
    guard_note = "; guest guard " + guest_guard + " (unloads copied best effort)";
  else if (guard && !guard_unheld.empty())
    guard_note = "; " + std::to_string(guard_unheld.size()) + " freeing path(s) unheld by the guest's guard (copied best effort)";
  return std::string(head) + guard_note + "; PT " + pt_source + " " + human_bytes(pt_bytes) + "; " + losses.describe() + " (" +
         end_reason + ")";
}

}  // namespace kt
