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

}  // namespace kt
