#include "kthost/trace/holder_boost.h"

#include <sched.h>

#include <algorithm>

namespace kt {

HolderBoost::HolderBoost(std::vector<VcpuThread> threads, int priority,
                         std::function<void(const std::string&)> notice)
    : priority_(priority), notice_(std::move(notice)) {
  for (const auto& t : threads) tids_[static_cast<uint32_t>(t.cpu_index)] = t.thread_id;
}

HolderBoost::~HolderBoost() { end_all(Clock::now()); }

void HolderBoost::say_once(const std::string& text) {
  if (error_said_) return;
  error_said_ = true;
  if (notice_) notice_(text);
}

void HolderBoost::lower_leftovers() {
  for (const auto& [cpu, tid] : tids_) {
    auto now = thread_scheduling(tid);
    if (!now || now->policy != SCHED_FIFO || now->priority != priority_) continue;
    if (auto st = set_thread_scheduling(tid, {SCHED_OTHER, 0}); !st) {
      ++stats_.errors;
      say_once("holder boost: " + st.error().message);
      continue;
    }
    ++stats_.leftovers;
    if (notice_)
      notice_("holder boost: vCPU " + std::to_string(cpu) + "'s thread " + std::to_string(tid) +
              " ran under SCHED_FIFO " + std::to_string(priority_) +
              ", which its VM does not ask for: left raised by a kthost that did not end cleanly; set back to "
              "normal scheduling");
  }
}

void HolderBoost::hold_seen(uint64_t id, uint32_t cpu, Clock::time_point now) {
  if (auto it = raised_.find(cpu); it != raised_.end()) {
    it->second.ids.insert(id);
    return;
  }
  auto tid = tids_.find(cpu);
  if (tid == tids_.end()) {
    ++stats_.no_thread;
    return;
  }
  auto before = thread_scheduling(tid->second);
  if (!before) {
    ++stats_.errors;
    say_once("holder boost: " + before.error().message + ": holds on guest CPU " + std::to_string(cpu) +
             " are not boosted");
    return;
  }
  if (before->real_time()) {
    if (left_alone_.insert(cpu).second && notice_)
      notice_("holder boost: vCPU " + std::to_string(cpu) + "'s thread " + std::to_string(tid->second) +
              " already runs under a real-time policy (priority " + std::to_string(before->priority) +
              "): its holds are not boosted, and it is left as it is");
    return;
  }
  if (auto st = set_thread_scheduling(tid->second, {SCHED_FIFO, priority_}); !st) {
    ++stats_.errors;
    say_once("holder boost: " + st.error().message + ": holds wait for the host's CPUs like any guest work");
    return;
  }
  ++stats_.boosts;
  raised_[cpu] = Raised{tid->second, *before, now, {id}};
}

void HolderBoost::lower(std::map<uint32_t, Raised>::iterator it, Clock::time_point now) {
  const double ms = std::chrono::duration<double, std::milli>(now - it->second.since).count();
  stats_.max_ms = std::max(stats_.max_ms, ms);
  if (auto st = set_thread_scheduling(it->second.tid, it->second.before); !st) {
    ++stats_.errors;
    say_once("holder boost: " + st.error().message);
  }
  raised_.erase(it);
}

void HolderBoost::holds_waiting(const std::set<uint64_t>& waiting, Clock::time_point now) {
  for (auto it = raised_.begin(); it != raised_.end();) {
    auto next = std::next(it);
    auto& ids = it->second.ids;
    for (auto id = ids.begin(); id != ids.end();) id = waiting.count(*id) ? std::next(id) : ids.erase(id);
    if (ids.empty()) {
      lower(it, now);
    } else if (now - it->second.since >= kMaxBoost) {
      ++stats_.timeouts;
      lower(it, now);
    }
    it = next;
  }
}

void HolderBoost::end_all(Clock::time_point now) {
  while (!raised_.empty()) lower(raised_.begin(), now);
}

}  // namespace kt
