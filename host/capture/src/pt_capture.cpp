#include "kthost/capture/pt_capture.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "kthost/common/fd.h"
#include "kthost/pt/hardware_source.h"
#include "kthost/pt/requirements.h"
#include "kthost_shared.h"

namespace kt {
namespace {

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

Result<PtChoice> parse_pt_choice(const std::string& text) {
  if (text == "auto") return PtChoice::Auto;
  if (text == "hardware") return PtChoice::Hardware;
  if (text == "software") return PtChoice::Software;
  if (text == "none") return PtChoice::None;
  return Error(ErrorCode::InvalidArgument, "--pt must be auto, hardware, software or none, not '" + text + "'");
}

Result<std::unique_ptr<PtCapture>> PtCapture::open(PtChoice choice, const VmDescription& vm, Monitor* monitor,
                                                   const std::string& label, const std::string& work_dir,
                                                   const PtConfig& config, const SystemRoots& roots) {
  if (choice == PtChoice::None) return std::unique_ptr<PtCapture>();
  std::string why_not_hw;
  if (choice == PtChoice::Auto || choice == PtChoice::Hardware) {
    for (const auto& c : check_hardware_pt_requirements(roots))
      if (!c.ok && why_not_hw.empty()) why_not_hw = c.name + ": " + c.detail;
    if (why_not_hw.empty() && vm.accel != "kvm") why_not_hw = "the guest runs under " + vm.accel + ", not KVM";
    if (why_not_hw.empty() && !monitor) why_not_hw = "no QMP monitor to find the vCPU threads";
    if (why_not_hw.empty()) return hardware(*monitor, work_dir, config);
    if (choice == PtChoice::Hardware)
      return Error(ErrorCode::Unsupported, "no hardware PT: " + why_not_hw + " (kthost doctor says how to fix it)");
  }
  auto sw = software(vm.pt_plugin_out, vm.pt_plugin_trigger, vm.vcpus, monitor,
                     same_pid_namespace(vm.pid) ? TriggerLiveness::Pid : TriggerLiveness::Heartbeat);
  if (sw || choice == PtChoice::Software) return sw;
  return Error(ErrorCode::Unsupported, "no PT source for " + label + ": hardware: " + why_not_hw +
                                           "; software: " + sw.error().message + ". --pt none traces without PT");
}

bool same_pid_namespace(int pid) {
  struct stat mine {}, theirs {};
  if (pid <= 0 || ::stat("/proc/self/ns/pid", &mine) != 0 ||
      ::stat(("/proc/" + std::to_string(pid) + "/ns/pid").c_str(), &theirs) != 0)
    return false;
  return mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

Result<std::unique_ptr<PtCapture>> PtCapture::software(const std::string& out_dir, const std::string& trigger,
                                                         int vcpus, Monitor* monitor, TriggerLiveness liveness) {
  if (out_dir.empty() || trigger.empty())
    return Error(ErrorCode::Unsupported,
                 "the guest's QEMU does not run the software PT plugin with out= and trigger= "
                 "(start it with ktvm --plugin build/pt-plugin/ktpt.so,out=DIR,trigger=FILE)");
  if (vcpus < 1 || vcpus > 4096) return Error(ErrorCode::InvalidArgument, "bad vCPU count " + std::to_string(vcpus));
  auto c = std::unique_ptr<PtCapture>(new PtCapture());
  c->kind_ = "software";
  c->trigger_ = trigger;
  c->liveness_ = liveness;
  c->started_path_ = out_dir + "/" KTHOST_PT_FILE_STARTED;
  c->monitor_ = monitor;
  for (int i = 0; i < vcpus; ++i) {
    const std::string base = out_dir + "/" KTHOST_PT_FILE_PREFIX + std::to_string(i);
    c->streams_.push_back(
        Stream{static_cast<uint32_t>(i), base + KTHOST_PT_FILE_PACKETS, base + KTHOST_PT_FILE_STOPPED, 0, 0});
  }
  return c;
}

Result<std::unique_ptr<PtCapture>> PtCapture::hardware(Monitor& monitor, const std::string& work_dir,
                                                         const PtConfig& config) {
  KT_ASSIGN_OR_RETURN(auto threads, query_vcpu_threads(monitor));
  std::vector<PtThread> pt;
  for (const auto& t : threads) pt.push_back(PtThread{static_cast<unsigned>(t.cpu_index), t.thread_id});
  if (::mkdir(work_dir.c_str(), 0755) != 0 && errno != EEXIST) return io_error("mkdir " + work_dir, errno);
  KT_ASSIGN_OR_RETURN(auto hw, PtHardwareSource::open_system(config, pt, work_dir));
  auto c = std::unique_ptr<PtCapture>(new PtCapture());
  c->kind_ = "hardware";
  for (const auto& s : hw->stats()) c->streams_.push_back(Stream{s.vcpu, s.path, "", 0, 0});
  c->hw_ = std::move(hw);
  return c;
}

PtCapture::~PtCapture() {
  if (running_) (void)stop(nullptr);
}

Status PtCapture::start() {
  if (hw_) {
    KT_TRY(hw_->enable());
  } else {
    // The plugin appends to the same files across traces: skip what is
    // there. Markers of an earlier stop would confirm this trace's end early.
    for (auto& s : streams_) {
      if (::unlink(s.stopped_path.c_str()) != 0 && errno != ENOENT) return io_error("remove " + s.stopped_path, errno);
      s.offset = file_size(s.path);
    }
    if (::unlink(started_path_.c_str()) != 0 && errno != ENOENT) return io_error("remove " + started_path_, errno);
    unconfirmed_.clear();
    // Our pid in the trigger: the plugin switches itself off if we die. From
    // another pid namespace, a heartbeat: poll() keeps its mtime fresh.
    UniqueFd fd(::open(trigger_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return io_error("create the PT plugin's trigger " + trigger_, errno);
    std::string pid = liveness_ == TriggerLiveness::Pid ? std::to_string(::getpid()) + "\n"
                                                        : std::string(KTHOST_PT_TRIGGER_HEARTBEAT "\n");
    last_touch_ = std::chrono::steady_clock::now();
    if (::write(fd.get(), pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
      Error e = io_error("write " + trigger_, errno);
      (void)::unlink(trigger_.c_str());
      return e;
    }
    // The plugin sees the trigger at its next poll: until it confirms, what
    // the guest runs is not traced, so nothing may start before that.
    const auto asked = std::chrono::steady_clock::now();
    const bool confirmed = wait_for_file(started_path_, start_timeout_);
    start_wait_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - asked).count();
    if (!confirmed) {
      (void)::unlink(trigger_.c_str());
      return Error(ErrorCode::Timeout, "the software PT plugin did not confirm it switched on (no " + started_path_ +
                                           " within " + std::to_string(start_timeout_.count()) +
                                           " ms of creating " + trigger_ +
                                           "): is the guest's QEMU running this build's ktpt.so?");
    }
  }
  running_ = true;
  return {};
}

bool PtCapture::wait_for_file(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  struct stat st {};
  while (::stat(path.c_str(), &st) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

Status PtCapture::tail(Stream& s, const Sink& sink) {
  UniqueFd fd(::open(s.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return {};  // this vCPU has not written yet
    return io_error("open " + s.path, errno);
  }
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = ::pread(fd.get(), buf, sizeof buf, static_cast<off_t>(s.offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("read " + s.path, errno);
    }
    if (n == 0) return {};
    s.offset += static_cast<uint64_t>(n);
    s.bytes += static_cast<uint64_t>(n);
    if (sink) KT_TRY(sink(s.cpu, buf, static_cast<size_t>(n)));
  }
}

Status PtCapture::touch_trigger() {
  if (hw_ || !running_ || liveness_ != TriggerLiveness::Heartbeat) return {};
  const auto now = std::chrono::steady_clock::now();
  if (now - last_touch_ < std::chrono::seconds(1)) return {};
  last_touch_ = now;
  if (::utimensat(AT_FDCWD, trigger_.c_str(), nullptr, 0) == 0) return {};
  if (errno == ENOENT)
    return Error(ErrorCode::Io, "the software PT plugin switched PT off and removed " + trigger_ +
                                    ": it was not touched for " + std::to_string(KTHOST_PT_TRIGGER_HEARTBEAT_S) +
                                    " s (was kthost stalled?)");
  return io_error("touch " + trigger_, errno);
}

Status PtCapture::poll(const Sink& sink) {
  Status first = touch_trigger();
  if (hw_) {
    if (auto st = hw_->drain(); !st && first) first = st;
  }
  for (auto& s : streams_)
    if (auto st = tail(s, sink); !st && first) first = st;
  return first;
}

Status PtCapture::stop(const Sink& sink) {
  if (!running_) return {};
  running_ = false;
  Status first;
  if (hw_) {
    if (auto st = hw_->disable(); !st) first = st;
  } else {
    if (::unlink(trigger_.c_str()) != 0 && errno != ENOENT) first = io_error("remove " + trigger_, errno);
    // The plugin polls its trigger every KTHOST_PT_TRIGGER_POLL_MS; each vCPU
    // then ends its stream at its next block, or when it next goes idle. A
    // halted vCPU may sleep through it: stop/cont makes every vCPU go idle.
    if (!wait_for_markers(std::chrono::milliseconds(15 * KTHOST_PT_TRIGGER_POLL_MS))) {
      auto woken = wake_vcpus();
      if (!woken && first) first = woken.error();
      if (woken && *woken) (void)wait_for_markers(std::chrono::seconds(2));
    }
    unconfirmed_ = waiting_for_markers();
  }
  if (auto st = poll(sink); !st && first) first = st;
  return first;
}

std::vector<uint32_t> PtCapture::waiting_for_markers() const {
  std::vector<uint32_t> out;
  struct stat st {};
  for (const auto& s : streams_)
    if (!s.stopped_path.empty() && ::stat(s.stopped_path.c_str(), &st) != 0) out.push_back(s.cpu);
  return out;
}

bool PtCapture::wait_for_markers(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (waiting_for_markers().empty()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(KTHOST_PT_TRIGGER_POLL_MS));
  }
}

// A VM stop makes every vCPU thread go idle (the plugin's idle callback),
// even one already halted. Only a running VM is touched, and it is always
// continued: cont is retried until QEMU says it runs. True when it was done.
Result<bool> PtCapture::wake_vcpus() {
  if (!monitor_) return false;
  auto status = monitor_->execute("query-status");
  if (!status) return status.error().with_context("waking the vCPUs to end their PT streams");
  if (!status->is_object() || !(*status)["status"].is_string() || (*status)["status"] != "running") return false;
  auto stopped = monitor_->execute("stop");
  if (!stopped) return stopped.error().with_context("waking the vCPUs to end their PT streams (stop)");
  Error last(ErrorCode::Io, "not tried");
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (auto cont = monitor_->execute("cont"); cont) return true;
    else last = cont.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last.with_context("the guest was paused to end its PT streams and could not be continued: run "
                           "'virsh resume' or QMP 'cont'");
}

std::vector<uint32_t> PtCapture::cpus() const {
  std::vector<uint32_t> out;
  for (const auto& s : streams_) out.push_back(s.cpu);
  return out;
}

std::vector<PtCaptureStats> PtCapture::stats() const {
  std::vector<PtCaptureStats> out;
  for (const auto& s : streams_) out.push_back(PtCaptureStats{s.cpu, s.bytes, s.path, std::nullopt});
  if (hw_)
    for (const auto& h : hw_->stats())
      for (auto& o : out)
        if (o.cpu == h.vcpu) o.ring = h.ring;
  return out;
}

uint64_t PtCapture::total_bytes() const {
  uint64_t t = 0;
  for (const auto& s : streams_) t += s.bytes;
  return t;
}

}  // namespace kt
