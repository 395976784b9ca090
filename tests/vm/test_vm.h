// TestVm: a real QEMU guest booted from the bundled test image with the
// launcher (vm-images/ktvm), for integration tests. It always stops the guest
// in its destructor, and prints the console's tail when a test failed.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/vm/guest_exec.h"
#include "kthost/vm/qmp_client.h"
#include "kthost/vm/vm_description.h"

namespace kt::test {

struct VmOptions {
  std::string name = "vm";
  std::string mem = "512M";
  int smp = 2;
  std::string ram_backend = "file";  // file, memfd, none
  std::string machine = "q35";
  int boot_timeout_s = 150;
  // "single" for guests that patch their text at a high rate (ftrace): with
  // one host thread per vCPU, QEMU 7.2 TCG let both vCPUs spin forever on a
  // function-entry site during the function-tracer storm (soft lockups in
  // _raw_read_lock+0x0); one thread for all vCPUs did not.
  std::string tcg_threads = "multi";
  std::string accel = "auto";   // auto: the rule of `kthost accel`
  std::string append = "";      // extra kernel command line
  int silence_timeout_s = 0;    // 0: the launcher's default
};

// Runs a shell command line with a hard timeout; returns its exit status and
// stdout+stderr.
struct CommandResult {
  int status = -1;
  std::string output;
};
CommandResult run_command(const std::string& command_line, int timeout_s = 300);

// A host command running in the background (e.g. `kthost trace`), its
// stdout+stderr going to a file. The destructor kills it.
class Background {
 public:
  static Result<std::unique_ptr<Background>> start(const std::vector<std::string>& argv, const std::string& log_path);
  ~Background();
  int pid() const { return pid_; }
  void signal(int sig);
  // Waits up to `timeout` for the exit; returns the exit status (128+signal
  // when killed), or -1 on timeout.
  int wait(std::chrono::seconds timeout);
  std::string log() const;

 private:
  Background() = default;
  int pid_ = -1;
  bool reaped_ = false;
  int status_ = -1;
  std::string log_path_;
};

std::string image_dir();
std::string kthost_binary();
std::string launcher();

class TestVm {
 public:
  static Result<std::unique_ptr<TestVm>> start(const VmOptions& options);
  ~TestVm();

  const VmDescription& description() const { return vm_; }
  const std::string& vm_json() const { return vm_json_; }
  const std::string& state_dir() const { return state_dir_; }
  // The QMP connection, opened on first use. QEMU serves one QMP client per
  // socket: call close_qmp() before running a kthost command against the guest.
  QmpClient& qmp();
  void close_qmp() { qmp_.reset(); }
  // QEMU's chardev sockets serve one client too: release QMP and the exec
  // channel before a kthost command uses them (they reopen on next use).
  void release_channels() {
    qmp_.reset();
    exec_.reset();
  }
  // Runs a command in the guest; fails the Result if the channel fails.
  Result<ExecResult> exec(const std::string& command, std::chrono::seconds timeout = std::chrono::seconds(60));
  // exec() that also requires exit status 0; returns the output.
  Result<std::string> check(const std::string& command, std::chrono::seconds timeout = std::chrono::seconds(60));
  std::string console_tail(size_t lines = 40) const;
  // Stops the guest now (the destructor then does nothing).
  Status stop();

 private:
  TestVm() = default;
  std::string state_dir_, vm_json_;
  VmDescription vm_;
  std::unique_ptr<QmpClient> qmp_;
  std::unique_ptr<GuestExec> exec_;
  bool stopped_ = false;
};

}  // namespace kt::test
