// GuestWorkload: a command run in the guest (ktexec's channel) on its own
// thread, so a trace goes on stepping while it runs: `kthost trace -- CMD`
// traces exactly while CMD runs, as `perf record -- CMD` does.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/vm/guest_exec.h"

namespace kt {

class GuestWorkload {
 public:
  // Connects to the exec channel first, so a guest without ktexec fails here,
  // before anything is traced. `timeout`: the guest kills the command then.
  // The words are joined with spaces and run by /bin/sh -c.
  static Result<std::unique_ptr<GuestWorkload>> start(const std::string& exec_socket,
                                                      const std::vector<std::string>& words,
                                                      std::chrono::milliseconds timeout);
  // Stops waiting for the command (it goes on in the guest until it ends or
  // times out there) and joins; done() stays false when it was stopped.
  ~GuestWorkload();

  bool done() const { return done_.load(std::memory_order_acquire); }
  // Once done(): the command's result, or why it could not be run.
  const Result<ExecResult>& result() const { return result_; }
  // The process exit status that stands for the result (127 not run, 255
  // for anything that is not an exit code, 1 when the channel failed).
  int exit_status() const;

 private:
  explicit GuestWorkload(GuestExec exec) : exec_(std::move(exec)), result_(Error(ErrorCode::Io, "not finished")) {}
  GuestExec exec_;
  std::atomic<bool> done_{false};
  Result<ExecResult> result_;
  std::thread thread_;
};

// Where `kthost trace` writes without -o: NAME-YYYYMMDD-HHMMSS in the current
// directory, NAME made safe for a file name.
std::string default_trace_dir(const std::string& name, std::chrono::system_clock::time_point when);

}  // namespace kt
