// QmpClient: one connection to a QEMU QMP unix socket.
//
// Replies are matched to commands by id; asynchronous events that arrive in
// between are queued (bounded) for take_events(). Every wait has a timeout.
#pragma once

#include <chrono>
#include <deque>
#include <string>

#include "kthost/common/fd.h"
#include "kthost/vm/monitor.h"

namespace kt {

class QmpClient final : public Monitor {
 public:
  static constexpr size_t kMaxMessageBytes = 64u << 20;  // bounds one reply line
  static constexpr size_t kMaxQueuedEvents = 4096;

  // Connects, reads the greeting and negotiates capabilities.
  static Result<QmpClient> connect(const std::string& socket_path,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

  QmpClient(QmpClient&&) = default;
  QmpClient& operator=(QmpClient&&) = default;

  Result<nlohmann::json> execute(const std::string& command,
                                 const nlohmann::json& arguments = nlohmann::json::object()) override;

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  // Events received so far, oldest first; clears the queue.
  std::deque<nlohmann::json> take_events();
  uint64_t dropped_events() const { return dropped_events_; }
  const nlohmann::json& greeting() const { return greeting_; }

 private:
  QmpClient() = default;
  // Reads one JSON message (one line). Errors on timeout, EOF, oversize, bad JSON.
  Result<nlohmann::json> read_message(std::chrono::steady_clock::time_point deadline);

  UniqueFd fd_;
  std::string buffer_;
  std::deque<nlohmann::json> events_;
  uint64_t dropped_events_ = 0;
  uint64_t next_id_ = 1;
  nlohmann::json greeting_;
  std::chrono::milliseconds timeout_ = std::chrono::seconds(10);
  std::string path_;
};

}  // namespace kt
