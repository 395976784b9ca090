// GuardResponder: answers ktguard's holds. For each GUARD_NOTICE it copies
// the range from guest RAM into the text store (TextSaver, which also stores
// the ack word in guest RAM), sends the channel ack, times the whole answer,
// and queues one line for holds.jsonl. The guest's hold ends on whichever ack
// it sees first; its own timeout bounds it when this process dies.
//
// Threads: answer() and answer_polled() run on the threads that answer holds,
// under the caller's lock, and never touch the disk (a write() of holds.jsonl
// stalled in the kernel's dirty-page throttling while PT streamed to disk held
// the mirror's poll up for 3-10 ms, past ktguard's word poll). The caller's
// main thread takes the queued lines under its lock (take_lines) and writes
// them without it (write_lines).
#pragma once

#include <cstdio>
#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kthost/capture/text_saver.h"

namespace kt {

struct HoldTotals {
  uint64_t holds = 0;
  uint64_t polled = 0;       // of them, found in ktguard's mirror in guest RAM before their notice came
  uint64_t acks_failed = 0;  // the channel ack could not be sent
  uint64_t lines_dropped = 0;  // holds.jsonl lines not queued: the queue was full (the writer fell behind)
  double host_us_max = 0, host_us_total = 0;
  double host_us_mean() const { return holds ? host_us_total / static_cast<double>(holds) : 0.0; }
};

nlohmann::json hold_json(const HoldRecord& h);

// The mirror poll that found a hold: its sleep before it, and its wait for
// the session's lock.
struct MirrorPollTiming {
  double sleep_us = 0, lock_us = 0;
};

class GuardResponder {
 public:
  using AckSender = std::function<Status(uint64_t id, uint32_t status)>;
  // Called once, the first time an ack word cannot be stored (holds then
  // wait for the channel ack): for the user, not per hold.
  using Notice = std::function<void(const std::string&)>;

  // `holds_path`: where holds.jsonl goes ("" for none). `send_ack` may be
  // empty when every answer() passes its own.
  static Result<GuardResponder> create(TextSaver& saver, AckSender send_ack, const std::string& holds_path,
                                       Notice notice = {});
  GuardResponder(GuardResponder&& other) noexcept;
  GuardResponder& operator=(GuardResponder&&) = delete;
  ~GuardResponder();

  HoldRecord answer(const SidebandEvent& ev, const GuardNoticeEvent& notice) { return answer(ev, notice, send_ack_); }
  // With the ack sender of the thread that answers (SidebandReader's).
  HoldRecord answer(const SidebandEvent& ev, const GuardNoticeEvent& notice, const AckSender& send_ack);
  // A notice read from ktguard's mirror in guest RAM (GuardMirror): saved,
  // and its ack word stored, now. When its channel notice comes, answer()
  // only sends the channel ack, with the same status.
  HoldRecord answer_polled(const SidebandEvent& ev, const GuardNoticeEvent& notice, MirrorPollTiming timing = {});
  // A new guard session: ids polled before may come again from a reloaded ktguard.
  void forget_polled() { polled_.clear(); }
  // The holds.jsonl lines queued since the last call (under the caller's lock).
  std::string take_lines() { return std::exchange(pending_, {}); }
  // Appends lines to holds.jsonl and flushes it. Touches only the file: call
  // it without the lock, from one thread.
  void write_lines(const std::string& lines);
  // take_lines and write_lines together: when no other thread answers.
  void flush() { write_lines(take_lines()); }
  const HoldTotals& totals() const { return totals_; }

 private:
  GuardResponder(TextSaver& saver, AckSender send_ack, FILE* holds, Notice notice)
      : saver_(saver), send_ack_(std::move(send_ack)), holds_(holds), notice_(std::move(notice)) {}
  TextSaver& saver_;
  AckSender send_ack_;
  FILE* holds_ = nullptr;
  Notice notice_;
  bool word_error_shown_ = false;
  HoldTotals totals_;
  std::map<uint64_t, uint32_t> polled_;  // id -> ack status, for holds answered from the mirror
  std::string pending_;                  // queued holds.jsonl lines (bounded: kMaxPendingBytes)
  void record(HoldRecord& h, std::chrono::steady_clock::time_point t0);
};

}  // namespace kt
