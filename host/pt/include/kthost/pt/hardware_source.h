// The hardware PT source: perf intel_pt on each QEMU vCPU thread (KVM,
// kvm_intel pt_mode=0), one AUX ring per thread, drained to one raw PT file
// per vCPU (<out_dir>/vcpu<N>.pt). The trace holds host code (KVM's run loop)
// and guest code; the decoder keeps the non-root parts (PIP.NR, VMCS).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/pt/aux_ring.h"
#include "kthost/pt/config.h"
#include "kthost/pt/pmu.h"

namespace kt {

struct PtThread {
  unsigned vcpu = 0;  // index as QEMU numbers it (query-cpus-fast cpu-index)
  pid_t tid = 0;      // host thread id (query-cpus-fast thread-id)
};

struct VcpuCaptureStats {
  unsigned vcpu = 0;
  pid_t tid = 0;
  std::string path;  // where its trace goes
  AuxRingStats ring;
};

class PtHardwareSource {
 public:
  // Opens intel_pt (disabled) on every thread with perf_event_open(pid=tid,
  // cpu=-1), maps its data and AUX rings (AUX writable: the kernel never
  // overwrites unread trace, it truncates and says so), and creates the
  // output files. Nothing is left open on failure. Errors:
  //   InvalidArgument  no threads, duplicate vCPUs, bad ring sizes, or a config the PMU rejects
  //   Unsupported      the kernel has no PMU of the given type (intel_pt absent)
  //   Io               perf_event_open/mmap/file errors, with errno, the tid and a hint
  static Result<std::unique_ptr<PtHardwareSource>> open(const PtPmu& pmu, const PtConfig& config,
                                                        const std::vector<PtThread>& threads,
                                                        const std::string& out_dir);
  // Loads the PMU from pmu_dir first; Unsupported "intel_pt PMU absent" where there is none.
  static Result<std::unique_ptr<PtHardwareSource>> open_system(const PtConfig& config,
                                                               const std::vector<PtThread>& threads,
                                                               const std::string& out_dir,
                                                               const std::string& pmu_dir = PtPmu::kDefaultDir);

  ~PtHardwareSource();
  PtHardwareSource(const PtHardwareSource&) = delete;
  PtHardwareSource& operator=(const PtHardwareSource&) = delete;

  // Starts and stops tracing on every thread. After disable() the kernel has
  // flushed the trace: drain() once more to take the last of it.
  Status enable();
  Status disable();
  // Drains every vCPU's rings once into its file. The first error is
  // returned after every vCPU was tried.
  Status drain();
  std::vector<VcpuCaptureStats> stats() const;

  struct Stream;  // one vCPU: event fd, mappings, consumer, output file

 private:
  PtHardwareSource() = default;
  std::vector<std::unique_ptr<Stream>> streams_;
  bool enabled_ = false;
};

}  // namespace kt
