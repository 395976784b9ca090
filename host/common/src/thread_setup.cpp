#include "kthost/common/thread_setup.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace kt {

void name_this_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

Status set_this_thread_nice(int nice) {
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  if (::setpriority(PRIO_PROCESS, tid, nice) != 0)
    return io_error("set this thread's nice value to " + std::to_string(nice), errno);
  return ok_status();
}

Status set_this_thread_fifo(int priority) {
  sched_param p{};
  p.sched_priority = priority;
  if (int err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &p); err != 0)
    return io_error("run this thread under SCHED_FIFO at priority " + std::to_string(priority), err);
  return ok_status();
}

bool ThreadScheduling::real_time() const { return policy == SCHED_FIFO || policy == SCHED_RR; }

Result<ThreadScheduling> thread_scheduling(int tid) {
  ThreadScheduling s;
  s.policy = ::sched_getscheduler(tid);
  if (s.policy < 0) return io_error("read the scheduling policy of thread " + std::to_string(tid), errno);
  s.policy &= ~SCHED_RESET_ON_FORK;
  sched_param p{};
  if (::sched_getparam(tid, &p) != 0) return io_error("read the priority of thread " + std::to_string(tid), errno);
  s.priority = p.sched_priority;
  return s;
}

Status set_thread_scheduling(int tid, const ThreadScheduling& scheduling) {
  sched_param p{};
  p.sched_priority = scheduling.priority;
  if (::sched_setscheduler(tid, scheduling.policy, &p) != 0)
    return io_error("set thread " + std::to_string(tid) + "'s scheduling to " +
                        (scheduling.real_time() ? "SCHED_FIFO/RR priority " + std::to_string(scheduling.priority)
                                                : std::string("normal")),
                    errno);
  return ok_status();
}

}  // namespace kt
