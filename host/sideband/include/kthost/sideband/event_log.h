// EventLog: the ordered, queryable log of everything the guest reported.
// Bounded: past max_events, events are counted as dropped, never silently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kthost/sideband/events.h"

namespace kt {

class EventLog {
 public:
  explicit EventLog(size_t max_events = 20'000'000) : max_events_(max_events) {}

  // Appends in arrival order and assigns each event's index.
  void append(std::vector<SidebandEvent>&& events);
  const std::vector<SidebandEvent>& events() const { return events_; }
  size_t size() const { return events_.size(); }

  // Events of one kind (event_kind() names: "text_poke", "ksymbol", ...).
  size_t count(const std::string& kind) const;
  std::vector<const SidebandEvent*> of_kind(const std::string& kind) const;
  // Events with guest time in [t0, t1], in log order.
  std::vector<const SidebandEvent*> between(uint64_t t0, uint64_t t1) const;
  // Sum of LostEvent counts of one ktp_lost_kind (1 perf ring, 2 queue, 3 guard timeout, 4 module race).
  // Losses that happened while this log was taken: the live LOST frames, and
  // for the guard kinds (3, 5) the growth of the guest's totals since ktguard
  // loaded, between two of this log's sessions, beyond what live frames said.
  uint64_t lost(uint32_t kind) const;
  // Guard kinds (3, 5): the largest total since ktguard loaded that the guest
  // reported at a session start, or lost(kind) when larger. Frees before this
  // log (at boot, say) count here, not in lost().
  uint64_t lost_since_load(uint32_t kind) const;
  static constexpr uint32_t kLostTotalSinceLoad = 0xFFFFFFFFu;  // KTP_LOST_TOTAL_SINCE_LOAD
  // The guest's newest counters, from its last heartbeat (nullptr before any).
  const HeartbeatEvent* last_heartbeat() const;
  // Events not kept because the log was full.
  uint64_t dropped() const { return dropped_; }

 private:
  size_t max_events_;
  std::vector<SidebandEvent> events_;
  std::map<std::string, size_t> counts_;
  std::map<uint32_t, uint64_t> lost_;
  std::map<uint32_t, uint64_t> lost_since_load_;
  std::map<uint32_t, uint64_t> last_total_;        // the last total since load, per kind
  std::map<uint32_t, uint64_t> live_since_total_;  // live LOST counts since the last total
  void add_total_since_load(uint32_t kind, uint64_t total);
  uint64_t dropped_ = 0;
  long last_heartbeat_ = -1;
};

}  // namespace kt
