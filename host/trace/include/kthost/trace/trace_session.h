// TraceSession: the main job as a library. It follows one running guest and
// writes a bundle (docs/BUNDLE.md):
//
//   open()    guest memory and the kernel's page tables, the PT source, the
//             bundle, the sideband channel; PT on (or later, by start_pt());
//             the initial kcore snapshot straight into the bundle.
//   step()    one round: the sideband events read since the last step, text
//             saved on loads and unloads, events and text into the bundle,
//             PT drained; once a second: liveness, losses, clock, flush.
//
// Guard holds are answered on the SidebandReader's own thread the moment
// their notice arrives (copy, ack word, channel ack), never behind a step's
// PT poll or flush; the bundle is written by the caller's thread alone.
//   finish()  PT off and drained, the last flush, summary.json.
//
// Used by `kthost trace` and by any other front end (an agent, a CI command).
// It never pauses the guest: a hold stops only the freeing context inside
// the guest, and ends at ktguard's timeout if this process dies.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/introspect/backends.h"
#include "kthost/capture/pt_capture.h"
#include "kthost/introspect/kernel_layout.h"
#include "kthost/pt/config.h"
#include "kthost/trace/trace_summary.h"
#include "kthost/vm/monitor.h"
#include "kthost/vm/vm_description.h"

namespace kt {

// The guest to trace, however it was found (vm.json or libvirt).
struct TraceTarget {
  VmDescription vm;
  Monitor* monitor = nullptr;  // QMP: registers, vCPU threads; must outlive the session
  std::string label;           // for messages: "domain NAME" or the vm.json path
  // Ok while the guest can still be traced; checked once a second.
  std::function<Status()> check_alive;
  // The vCPU threads as this host numbers them (a libvirt in a pod's pid
  // namespace gives them translated); empty: asked of the monitor.
  std::vector<VcpuThread> vcpu_threads;
  // Whether the VM's own configuration runs vCPU threads under a real-time
  // policy (libvirt's <vcpusched>). When it does not, a vCPU thread found
  // under SCHED_FIFO at the holder boost's priority was left raised by a
  // kthost that was killed inside a boost, and is set back.
  bool real_time_vcpus = false;
};


struct TraceOptions {
  std::string out_dir;
  BackendChoice backend = BackendChoice::Auto;
  PtChoice pt = PtChoice::Auto;
  PtConfig pt_config;
  bool guard = true;     // answer ktguard's holds (else best-effort unload copies)
  bool ack_word = true;  // also end holds through the ack word in guest RAM
  // The nice value of the threads that answer holds (the sideband reader and
  // the guard mirror's poller); unset: the process's. Below the process's it
  // needs CAP_SYS_NICE; without it they keep the process's, and a notice
  // says so. (tests/bench/run-agent-bench.sh GUARD_NICE=N measures it.)
  std::optional<int> guard_nice;
  // SCHED_FIFO priority of the same threads (0: normal scheduling). With it
  // a hold is answered as soon as the mirror's poll wakes, even while busy
  // vCPU threads fill the host's CPUs (under normal scheduling a 1 ms poll
  // sleep was seen to take 3-10 ms on a 2-core host with TCG guests: the
  // threads wait for their whole autogroup's turn). The threads sleep
  // between polls and do microseconds of work per hold. It needs
  // CAP_SYS_NICE; without it a notice says so and they run normally.
  int guard_rt = 2;
  // SCHED_FIFO priority of a vCPU thread while its guest CPU waits on a hold
  // seen in ktguard's mirror (holder_boost.h), until the hold ends, 5 ms at
  // most; 0: never. Below guard_rt, so that holds are still answered while
  // raised holders fill the host's CPUs. Needs CAP_SYS_NICE (a notice says
  // when it is missing).
  int holder_boost = 1;
  // PT on in open() (true), or only at start_pt() (false): `kthost trace --
  // CMD` starts it right before CMD, so that the session's own start (the
  // guest helper's state dump over virtio-serial, its interrupts) is not in
  // the trace. Text changed between the snapshot and start_pt() still comes
  // through the sideband, which is connected before the snapshot.
  bool pt_at_open = true;
  // Bounds on what a trace writes, checked once a second (so a limit is
  // passed by at most a second's PT); the trace then ends as after
  // --duration, its end reason naming the limit. A guest stuck in a loop
  // under the TCG plugin once wrote 10 GiB of PT before anyone noticed.
  uint64_t max_pt_bytes = 0;              // PT bytes (0: no limit)
  uint64_t min_free_bytes = 1ull << 30;   // free bytes left on the bundle's filesystem (0: no floor)
  // Messages for the user (warnings, what was chosen); stderr in the CLI.
  std::function<void(const std::string&)> notice;
};

// The command line's words for TraceOptions (absent: the default).
struct TraceOptionWords {
  std::optional<std::string> backend, pt, pt_psb, pt_mtc, pt_cyc;
  bool pt_no_tsc = false, no_guard = false, no_ack_word = false;
  std::string out_dir;
  std::optional<std::string> guard_nice, guard_rt, holder_boost;
  std::optional<std::string> max_pt, min_free;
};
// Errors: InvalidArgument naming the option and the value.
Result<TraceOptions> parse_trace_options(const TraceOptionWords& words);

// What the status line shows.
struct TraceProgress {
  double seconds = 0;
  size_t events = 0, text_pokes = 0;
  uint64_t holds = 0, text_bytes = 0, pt_bytes = 0, lost = 0;
  std::string status_line() const;  // "   12s  events 340  pokes 26  holds 4  saved 1.2 MiB  PT 30 MiB  lost 0"
};

// What a session runs on once the target is opened: open() finds them from
// the target; tests (and front ends that find them their own way) pass them.
struct TraceParts {
  std::unique_ptr<GuestMemory> memory;  // guest RAM; write_word for ack words
  KernelLayout layout;                  // page tables and the initial text's ranges
  std::unique_ptr<PtCapture> pt;        // null: no PT
  std::string channel_path;             // the org.kthost.0 unix socket
  int qemu_pid = 0;                     // for KVM's TSC offset (hardware PT)
};

class TraceSession {
 public:
  // Errors: the target lacks the org.kthost.0 channel (Unsupported), no PT
  // source for the choice, guest memory or page tables unreadable, the bundle
  // directory cannot be created, the channel does not connect.
  static Result<std::unique_ptr<TraceSession>> open(const TraceTarget& target, const TraceOptions& options);
  // The same on parts already opened: the bundle, the channel, the initial
  // snapshot and the sideband reader thread. `target` gives the label and
  // check_alive (its monitor may be null).
  static Result<std::unique_ptr<TraceSession>> open(TraceParts parts, const TraceTarget& target,
                                                    const TraceOptions& options);
  ~TraceSession();

  // Waits up to `wait` for sideband data and handles one round. Returns true
  // while the trace goes on, false when it ended by itself (the guest
  // stopped, the channel closed, PT or the bundle failed): end_reason() says
  // why and finish() still writes everything.
  bool step(std::chrono::milliseconds wait = std::chrono::milliseconds(100));

  // Steps until the guest helper has shaken hands and sent its state dump
  // (so its guard is open and every later unload is held), at most `timeout`.
  // False when that did not happen in time or the session ended.
  bool wait_ready(std::chrono::milliseconds timeout);
  // True once the guest helper has shaken hands and sent its whole state
  // dump (what wait_ready waits for); never blocks.
  bool ready() const;
  // PT on, for a session opened with pt_at_open false (else, or called
  // again: nothing). The trace's seconds count from here. Errors: the PT
  // source's (the session goes on without PT; finish() still writes).
  Status start_pt();
  // Whether the page tables the session opened on still map the kernel's
  // text. A session opened while the guest was booting walks the early
  // tables, which the kernel drops (and its initial text predates the boot's
  // own patching): a front end that finds this false once the guest is ready
  // should start a new bundle. Errors: the walk's, naming the table at fault.
  Status page_tables_still_valid();

  // Stops PT, closes the bundle and writes summary.json. `reason` is why the
  // caller ended (ignored when the session ended by itself). Errors: the
  // bundle or summary could not be written (what was flushed stays valid).
  Result<TraceSummary> finish(const std::string& reason);
  // For a session that ended by itself: what the caller learned since of the
  // cause (libvirt: "the domain migrated away"), put before the session's
  // own reason ("cause (own reason)") in end_reason() and summary.json.
  void explain_end(const std::string& cause);

  TraceProgress progress() const;
  const std::string& end_reason() const;
  bool failed() const;  // ended by itself on an error
  // "domain vm1, memory mmap, PT software on 2 vCPUs, guard on, writing DIR"
  std::string describe() const;
  std::string memory_backend() const;  // "mmap" or "process"
  std::string pt_source() const;       // "hardware", "software" or "none"

 private:
  struct State;
  explicit TraceSession(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace kt
