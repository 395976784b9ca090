// SidebandReader: the guest's sideband channel, read on a thread of its own.
// Guard holds are answered there the moment their notice is decoded, so a
// hold never waits behind the main thread's PT poll, flush or bundle write.
// Everything it reads (the notices too, after their answer) is queued in
// order for the main thread, with the host TSC at which it arrived.
//
// Threads: the reader thread alone touches the channel. `answer` runs on it;
// whatever it shares with the main thread, the caller locks. The main thread
// calls take(), view() and stop().
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/sideband/channel.h"
#include "kthost/trace/tsc_offset_estimator.h"

namespace kt {

struct SidebandBatch {
  std::vector<SidebandEvent> events;
  HostArrival received;  // host TSC and CLOCK_MONOTONIC_RAW right after the bytes were read
};

// What the main thread may know of the channel, copied after every read.
struct SidebandView {
  DecoderStats stats;
  bool handshake_done = false;
  // The latest complete state dump (null until the first).
  std::shared_ptr<const GuestState> state;
};

class SidebandReader {
 public:
  // Called on the reader thread for each GUARD_NOTICE before it is queued;
  // `ack` sends the channel's GUARD_ACK (valid during the call only).
  using AckSender = std::function<Status(uint64_t id, uint32_t status)>;
  using Answer = std::function<void(const SidebandEvent&, const GuardNoticeEvent&, const AckSender& ack)>;

  // Starts the thread, which first runs `at_start` (its name, its priority);
  // `poll_wait` bounds how long stop() waits for it.
  static std::unique_ptr<SidebandReader> start(SidebandChannel channel, Answer answer,
                                               std::function<void()> at_start = {},
                                               std::chrono::milliseconds poll_wait = std::chrono::milliseconds(20));
  ~SidebandReader();  // stop()
  SidebandReader(const SidebandReader&) = delete;
  SidebandReader& operator=(const SidebandReader&) = delete;

  // Waits up to `wait` for something to be queued, then returns every batch
  // queued so far. Once the channel failed: the batches read before it, then
  // (when none are left) the channel's error.
  Result<std::vector<SidebandBatch>> take(std::chrono::milliseconds wait);
  SidebandView view() const;
  // Ends the thread (a hold that is being answered is answered first).
  // Batches read before stay for take().
  void stop();

 private:
  SidebandReader(SidebandChannel channel, Answer answer, std::chrono::milliseconds poll_wait);
  void run();

  SidebandChannel channel_;  // reader thread only
  Answer answer_;
  std::chrono::milliseconds poll_wait_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SidebandBatch> queue_;
  std::optional<Error> error_;
  SidebandView view_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kt
