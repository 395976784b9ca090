#include "kthost/sideband/event_log.h"

#include <algorithm>

namespace kt {

void EventLog::append(std::vector<SidebandEvent>&& events) {
  for (auto& ev : events) {
    if (events_.size() >= max_events_) {
      ++dropped_;
      continue;
    }
    ev.index = events_.size();
    ++counts_[event_kind(ev.body)];
    if (const auto* lost = std::get_if<LostEvent>(&ev.body)) {
      if (lost->record_type == kLostTotalSinceLoad) add_total_since_load(lost->kind, lost->count);
      else {
        lost_[lost->kind] += lost->count;
        live_since_total_[lost->kind] += lost->count;
      }
    }
    if (std::holds_alternative<HeartbeatEvent>(ev.body)) last_heartbeat_ = static_cast<long>(events_.size());
    events_.push_back(std::move(ev));
  }
  events.clear();
}

size_t EventLog::count(const std::string& kind) const {
  auto it = counts_.find(kind);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<const SidebandEvent*> EventLog::of_kind(const std::string& kind) const {
  std::vector<const SidebandEvent*> out;
  for (const auto& ev : events_)
    if (kind == event_kind(ev.body)) out.push_back(&ev);
  return out;
}

std::vector<const SidebandEvent*> EventLog::between(uint64_t t0, uint64_t t1) const {
  std::vector<const SidebandEvent*> out;
  for (const auto& ev : events_)
    if (ev.time >= t0 && ev.time <= t1) out.push_back(&ev);
  return out;
}

uint64_t EventLog::lost(uint32_t kind) const {
  auto it = lost_.find(kind);
  return it == lost_.end() ? 0 : it->second;
}

// A total since ktguard loaded comes at every session start. The first one
// in this log covers what happened before it (boot, earlier traces): not this
// log's loss. A later one, after the guest helper reconnected or restarted
// within this log, may have grown by more than the live LOST frames in
// between reported: that difference fell between two sessions of this log,
// and is its loss.
// (A total below the last one means ktguard was loaded again: its counters
// restarted, and the next growth is measured from there.)
void EventLog::add_total_since_load(uint32_t kind, uint64_t total) {
  auto last = last_total_.find(kind);
  if (last != last_total_.end() && total > last->second) {
    uint64_t grown = total - last->second, reported = live_since_total_[kind];
    if (grown > reported) lost_[kind] += grown - reported;
  }
  live_since_total_[kind] = 0;
  last_total_[kind] = total;
  lost_since_load_[kind] = std::max(lost_since_load_[kind], total);
}

uint64_t EventLog::lost_since_load(uint32_t kind) const {
  auto it = lost_since_load_.find(kind);
  return std::max(it == lost_since_load_.end() ? 0 : it->second, lost(kind));
}

const HeartbeatEvent* EventLog::last_heartbeat() const {
  if (last_heartbeat_ < 0) return nullptr;
  return &std::get<HeartbeatEvent>(events_[static_cast<size_t>(last_heartbeat_)].body);
}

}  // namespace kt
