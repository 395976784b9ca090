#include "test_vm.h"

#include <stdlib.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "kthost/common/io.h"

namespace kt::test {

std::string image_dir() {
  const char* env = std::getenv("KTHOST_IMAGE_DIR");
  return env && *env ? env : KT_IMAGE_DIR;
}
std::string kthost_binary() { return KT_KTHOST_BINARY; }
std::string launcher() { return std::string(KT_SOURCE_DIR) + "/vm-images/ktvm"; }

Result<std::unique_ptr<Background>> Background::start(const std::vector<std::string>& argv,
                                                     const std::string& log_path) {
  auto bg = std::unique_ptr<Background>(new Background());
  bg->log_path_ = log_path;
  // Truncate here, not only in the child: until the child opens it, a caller
  // polling log() would read what an earlier run left in the file.
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return io_error("open " + log_path, errno);
  ::close(log_fd);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int pid = ::fork();
  if (pid < 0) return io_error("fork", errno);
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  bg->pid_ = pid;
  return bg;
}

Background::~Background() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Background::signal(int sig) {
  if (!reaped_ && pid_ > 0) ::kill(pid_, sig);
}

int Background::wait(std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    int st = 0;
    int r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return status_;
}

std::string Background::log() const {
  auto text = read_file(log_path_);
  return text ? *text : "";
}

CommandResult run_command(const std::string& command_line, int timeout_s) {
  std::string wrapped = "timeout --kill-after=10 " + std::to_string(timeout_s) + " sh -c '" ;
  for (char c : command_line) wrapped += c == '\'' ? std::string("'\\''") : std::string(1, c);
  wrapped += "' 2>&1";
  CommandResult result;
  FILE* pipe = ::popen(wrapped.c_str(), "r");
  if (!pipe) return result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) result.output.append(buf, n);
  int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

Result<std::unique_ptr<TestVm>> TestVm::start(const VmOptions& o) {
  auto vm = std::unique_ptr<TestVm>(new TestVm());
  char tmpl[] = "/tmp/kthost-vmtest-XXXXXX";
  if (!::mkdtemp(tmpl)) return io_error("mkdtemp", errno);
  vm->state_dir_ = tmpl;
  std::string cmd = launcher() + " start --image " + image_dir() + " --state-dir " + vm->state_dir_ +
                    " --name " + o.name + " --mem " + o.mem + " --smp " + std::to_string(o.smp) +
                    " --ram-backend " + o.ram_backend + " --machine " + o.machine +
                    " --boot-timeout " + std::to_string(o.boot_timeout_s) + " --tcg-threads " + o.tcg_threads +
                    " --accel " + o.accel;
  if (!o.append.empty()) cmd += " --append '" + o.append + "'";
  if (o.silence_timeout_s > 0) cmd += " --silence-timeout " + std::to_string(o.silence_timeout_s);
  auto r = run_command(cmd, o.boot_timeout_s + 60);
  vm->vm_json_ = vm->state_dir_ + "/vm.json";
  if (r.status != 0) {
    vm->stopped_ = true;
    return Error(ErrorCode::Io, "launcher failed (" + std::to_string(r.status) + "): " + r.output);
  }
  KT_ASSIGN_OR_RETURN(vm->vm_, VmDescription::load(vm->vm_json_));
  return vm;
}

QmpClient& TestVm::qmp() {
  if (!qmp_) {
    auto qmp = QmpClient::connect(vm_.qmp);
    if (!qmp) {
      ADD_FAILURE() << qmp.error().message;
      std::abort();
    }
    qmp_ = std::make_unique<QmpClient>(std::move(*qmp));
  }
  return *qmp_;
}

Result<ExecResult> TestVm::exec(const std::string& command, std::chrono::seconds timeout) {
  if (!exec_) {
    KT_ASSIGN_OR_RETURN(auto exec, GuestExec::connect(vm_.exec_channel, std::chrono::seconds(10)));
    exec_ = std::make_unique<GuestExec>(std::move(exec));
  }
  return exec_->run(command, timeout);
}

Result<std::string> TestVm::check(const std::string& command, std::chrono::seconds timeout) {
  KT_ASSIGN_OR_RETURN(ExecResult r, exec(command, timeout));
  if (r.status != 0)
    return Error(ErrorCode::Protocol, "guest command '" + command + "' exited " + std::to_string(r.status) + ": " + r.output);
  return r.output;
}

std::string TestVm::console_tail(size_t lines) const {
  auto text = read_file(vm_.console_log.empty() ? state_dir_ + "/console.log" : vm_.console_log, 64u << 20);
  if (!text) return "(no console log)";
  std::deque<std::string> tail;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (auto& l : tail) out += l + "\n";
  return out;
}

Status TestVm::stop() {
  if (stopped_) return {};
  stopped_ = true;
  exec_.reset();
  qmp_.reset();
  auto r = run_command(launcher() + " stop --vm " + vm_json_ + " --timeout 10", 60);
  if (r.status != 0) return Error(ErrorCode::Io, "ktvm stop failed: " + r.output);
  return {};
}

TestVm::~TestVm() {
  if (::testing::Test::HasFailure())
    std::fprintf(stderr, "---- guest console (last lines) from %s ----\n%s----\n", state_dir_.c_str(), console_tail().c_str());
  (void)stop();
}

}  // namespace kt::test
