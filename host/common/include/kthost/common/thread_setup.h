// What a kthost thread says of itself when it starts: its name (seen in
// top -H, perf and /proc/PID/task/*/comm), its nice value or real-time
// priority.
#pragma once

#include <string>

#include "kthost/common/result.h"

namespace kt {

// Names the calling thread (cut to the kernel's 15 characters).
void name_this_thread(const std::string& name);

// Sets the calling thread's nice value (Linux: per thread). Below the
// process's own it needs CAP_SYS_NICE (or RLIMIT_NICE); errors name the
// value and why.
Status set_this_thread_nice(int nice);

// Runs the calling thread under SCHED_FIFO at `priority` (1..99): it then
// preempts every normal task as soon as it wakes, whatever their share (with
// autogroup or cgroups, a normal thread waits for its whole group's turn).
// Needs CAP_SYS_NICE (or RLIMIT_RTPRIO); errors name the priority and why.
Status set_this_thread_fifo(int priority);

// Another thread's scheduling policy and real-time priority (its nice value
// is its own and is kept across a change of policy).
struct ThreadScheduling {
  int policy = 0;    // SCHED_OTHER, SCHED_FIFO, ...
  int priority = 0;  // 1..99 under SCHED_FIFO and SCHED_RR, else 0
  bool real_time() const;
};
Result<ThreadScheduling> thread_scheduling(int tid);
// Errors name the thread, the policy and why (ESRCH: it has exited; EPERM:
// no CAP_SYS_NICE).
Status set_thread_scheduling(int tid, const ThreadScheduling& scheduling);

}  // namespace kt
