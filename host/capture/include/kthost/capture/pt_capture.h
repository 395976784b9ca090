// PtCapture: the guest's per-vCPU Intel PT streams, from whichever source
// writes them, collected into a sink as they grow.
//
//   software  the TCG plugin (pt-plugin/ktpt.so) writes <out>/cpuN.pt while
//             its trigger file exists: start() creates the trigger and
//             waits for the plugin's <out>/started (from then on, all the
//             guest runs is traced), stop() removes it; bytes the files
//             held before start() are skipped.
//             stop() waits for every vCPU's <out>/cpuN.stopped marker (its
//             stream wholly written); vCPUs asleep through the switch are
//             woken by a QMP stop/cont; a vCPU that never confirms is
//             named by unconfirmed_cpus(), its stream's end possibly lost.
//   hardware  perf intel_pt on each vCPU thread (host/pt PtHardwareSource),
//             thread ids from QMP query-cpus-fast; its AUX rings are drained
//             to <work>/vcpuN.pt on every poll.
// Either way the capture tails those files, so a stream reaches the sink in
// order and in whole reads, whatever the source.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/common/system_roots.h"
#include "kthost/pt/aux_ring.h"
#include "kthost/pt/config.h"
#include "kthost/vm/monitor.h"
#include "kthost/vm/vm_description.h"

namespace kt {

enum class PtChoice { Auto, Hardware, Software, None };
Result<PtChoice> parse_pt_choice(const std::string& text);  // auto, hardware, software, none

class PtHardwareSource;

// How the software plugin tells that the tracer that switched PT on lives:
// by its pid (same pid namespace), or by the trigger's mtime, kept fresh.
enum class TriggerLiveness { Pid, Heartbeat };
// Whether process `pid` is in kthost's own pid namespace (false when unknown).
bool same_pid_namespace(int pid);

struct PtCaptureStats {
  uint32_t cpu = 0;
  uint64_t bytes = 0;
  std::string path;
  std::optional<AuxRingStats> ring;  // hardware: the AUX ring's counters (truncation, loss)
};

class PtCapture {
 public:
  using Sink = std::function<Status(uint32_t cpu, const uint8_t* data, size_t len)>;

  // The source for `choice`: hardware where this machine has everything for
  // it (kthost doctor's checks, under `roots`) and the guest runs under KVM;
  // else the TCG plugin where the guest's QEMU runs it (vm.pt_plugin_out and
  // _trigger); else an error naming why neither. None: a null capture.
  // `monitor` (QMP) is needed for hardware only; `work_dir` holds its streams.
  static Result<std::unique_ptr<PtCapture>> open(PtChoice choice, const VmDescription& vm, Monitor* monitor,
                                                 const std::string& label, const std::string& work_dir,
                                                 const PtConfig& config,
                                                 const SystemRoots& roots = live_system_roots());
  // `monitor` (may be null) wakes vCPUs that sleep through the switch-off.
  // `liveness`: how the plugin knows the tracer is alive (open() takes Pid
  // when QEMU shares kthost's pid namespace, else Heartbeat).
  static Result<std::unique_ptr<PtCapture>> software(const std::string& out_dir, const std::string& trigger, int vcpus,
                                                       Monitor* monitor = nullptr,
                                                       TriggerLiveness liveness = TriggerLiveness::Pid);
  // Errors: those of PtHardwareSource::open_system (Unsupported where there is no intel_pt).
  static Result<std::unique_ptr<PtCapture>> hardware(Monitor& monitor, const std::string& work_dir,
                                                     const PtConfig& config);
  ~PtCapture();

  // Software: returns once the plugin confirms it traces (Timeout, with the
  // trigger removed again, if it does not within set_start_timeout()).
  Status start();
  void set_start_timeout(std::chrono::milliseconds t) { start_timeout_ = t; }
  // Hands the sink every byte written since the last call; with a heartbeat
  // trigger, touches it (once a second).
  Status poll(const Sink& sink);
  // Switches the source off and hands the sink the rest. Also done (without
  // a sink) by the destructor, so the plugin is never left tracing.
  Status stop(const Sink& sink);

  const std::string& kind() const { return kind_; }
  std::vector<uint32_t> cpus() const;
  std::vector<PtCaptureStats> stats() const;
  uint64_t total_bytes() const;
  // Software: how long the last start() waited for the plugin's confirmation.
  double start_wait_ms() const { return start_wait_ms_; }
  // Software: the vCPUs whose end of stream the plugin did not confirm at
  // the last stop() (their last packets may be missing: counted as loss).
  const std::vector<uint32_t>& unconfirmed_cpus() const { return unconfirmed_; }

 private:
  PtCapture() = default;
  struct Stream {
    uint32_t cpu = 0;
    std::string path;
    std::string stopped_path;  // software: the plugin's end-of-stream marker
    uint64_t offset = 0;  // next byte to read
    uint64_t bytes = 0;   // handed to the sink
  };
  Status tail(Stream& s, const Sink& sink);
  std::vector<uint32_t> waiting_for_markers() const;
  bool wait_for_markers(std::chrono::milliseconds timeout) const;
  static bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout);
  std::chrono::milliseconds start_timeout_{10000};  // for the plugin's confirmation of start()
  Result<bool> wake_vcpus();
  Status touch_trigger();
  std::string kind_;
  std::string trigger_;
  std::string started_path_;  // software: the plugin's "PT is on" marker
  TriggerLiveness liveness_ = TriggerLiveness::Pid;
  std::chrono::steady_clock::time_point last_touch_;
  double start_wait_ms_ = 0;
  bool running_ = false;
  std::vector<Stream> streams_;
  std::unique_ptr<PtHardwareSource> hw_;
  Monitor* monitor_ = nullptr;
  std::vector<uint32_t> unconfirmed_;
};

}  // namespace kt
