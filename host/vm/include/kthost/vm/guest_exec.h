// The host side of the exec channel (guest-kit/include/ktexec_proto.h): runs
// a shell command in the guest through the ktexec agent.
//
// Everything the guest sends is untrusted: response headers are checked
// (magic, out_len <= KTEXEC_MAX_OUTPUT), bytes before a magic are skipped,
// and responses to other requests (left over from an earlier host client
// while the guest's write was blocked) are dropped by id.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kthost/common/fd.h"
#include "kthost/common/result.h"

namespace kt {

struct ExecResult {
  int status = -1;         // exit code; 128+signal if killed; -1 if not run
  std::string output;      // stdout and stderr, interleaved
  bool truncated = false;  // the guest dropped output past KTEXEC_MAX_OUTPUT
  bool timed_out = false;  // the guest killed the command at its timeout
  bool not_run = false;    // the guest could not start the command
  unsigned reconnects = 0; // times the host reconnected while waiting (see GuestExec::run)
};

// Decodes the response to request `want_id` from the front of `stream` and
// advances `stream` past every byte it used up: garbage before a magic and
// complete responses with another id are consumed and skipped.
// Returns:
//   - the result, with `stream` just past its frame;
//   - std::nullopt when more bytes are needed (`stream` then starts with a
//     partial frame or partial magic, or is empty);
//   - Protocol error when a header with the response magic carries
//     out_len > KTEXEC_MAX_OUTPUT (`stream` is advanced past that magic).
Result<std::optional<ExecResult>> decode_exec_response(std::string_view& stream, uint32_t want_id);

// How many more bytes `stream` (as left by decode_exec_response returning
// nullopt) needs before the next frame can be complete; at least 1.
size_t exec_response_bytes_wanted(std::string_view stream);

class GuestExec {
 public:
  // Connects to the exec channel's unix socket (vm.json "exec_channel").
  // Fails with Io when the socket cannot be connected within `timeout`.
  static Result<GuestExec> connect(const std::string& socket_path, std::chrono::milliseconds timeout);

  // Runs `command` with /bin/sh -c in the guest. The guest kills it after
  // `timeout` (ExecResult::timed_out); the host waits a little longer for the
  // answer, then fails with Timeout. Other failures: InvalidArgument (command
  // too long), Protocol (bad response or the channel closed), Io.
  // While no answer comes it reconnects and resends the request (1 s, then
  // with backoff): a guest that missed the connect (QEMU drops virtio-serial
  // control messages the guest has no buffer for) answers then; ktexec never
  // runs one request id twice.
  Result<ExecResult> run(const std::string& command, std::chrono::milliseconds timeout);

  // From another thread: makes a run() in progress return Io at once (the
  // command goes on in the guest until it ends or its timeout).
  void abort();

 private:
  explicit GuestExec(UniqueFd fd, uint32_t first_id) : fd_(std::move(fd)), next_id_(first_id) {}

  UniqueFd fd_;
  std::string socket_path_;  // for reconnecting while an answer is overdue
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  uint32_t next_id_;
  std::string pending_;  // bytes read but not yet decoded
};

}  // namespace kt
