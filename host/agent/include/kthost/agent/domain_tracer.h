// One domain's tracing under the agent, on a thread of its own, as an
// explicit state machine:
//
//   Opening ----> Tracing ----(rotation, reboot)----> Opening
//      |  ^          |  \----(budget reached)-------> OverBudget --(allowed again)--> Opening
//      |  |          |  \----(session failed)-------> Backoff ----(delay over)--------> Opening
//      |  +----------|-------------------------------- Backoff
//      v             v
//    Ended <-- the domain is gone (stopped, crashed, migrated, restarted by a new QEMU), or the agent stops
//
// Each tracer has its own libvirt connection, its own TraceSession and so its
// own guard responder thread: a slow or hostile domain never delays another
// domain's holds. Bundles go to OUT/<domain>/<boot-id>/<NNN>/, where boot-id
// is the QEMU process's start time and pid (plus -rN after N reboots in
// place), and NNN counts the bundles of that boot (rotation, retries).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kthost/agent/agent_config.h"
#include "kthost/agent/agent_status.h"
#include "kthost/common/result.h"

namespace kt {

enum class TracerState { Opening, Tracing, Backoff, OverBudget, Ended };
const char* tracer_state_name(TracerState state);

// "20261202T153000Z-pid4242": when and as which process a domain booted.
// Errors: the QEMU process's /proc entry is unreadable or malformed.
Result<std::string> boot_id_of_process(int pid);

// What every tracer reads from the agent, updated by it once a second.
struct AgentGauges {
  std::atomic<uint64_t> total_disk_bytes{0};
  std::atomic<uint64_t> memory_bytes{0};
};

class DomainTracer {
 public:
  using Log = std::function<void(const std::string&)>;
  // Starts the thread. `config` and `gauges` must outlive the tracer.
  DomainTracer(std::string name, const AgentConfig& config, const AgentGauges& gauges, Log log);
  ~DomainTracer();  // request_stop("agent stopping") and join
  DomainTracer(const DomainTracer&) = delete;
  DomainTracer& operator=(const DomainTracer&) = delete;

  // Ends the current bundle cleanly (reason in its summary.json) and the thread.
  void request_stop(const std::string& reason);
  // The guest rebooted in place: the current bundle ends, the next one goes
  // to a new boot directory.
  void request_new_boot(const std::string& reason);
  // In back-off: try again now (libvirt is back after an outage).
  void retry_now();

  DomainStatus status() const;
  bool ended() const { return state_.load() == TracerState::Ended; }
  const std::string& name() const { return name_; }

 private:
  struct Run;  // the thread's own state: the domain, the session
  void run();
  void set_state(TracerState state);
  // Waits up to `seconds` or until a request comes.
  void wait_for(double seconds);

  std::string name_;
  const AgentConfig& config_;
  const AgentGauges& gauges_;
  Log log_;

  std::atomic<TracerState> state_{TracerState::Opening};
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::string stop_reason_, new_boot_reason_;  // under mu_; non-empty: requested
  bool retry_now_ = false;                      // under mu_
  std::optional<std::chrono::steady_clock::time_point> last_new_boot_;  // under mu_: the last reboot report
  DomainStatus status_;                         // under mu_
  std::thread thread_;
};

}  // namespace kt
