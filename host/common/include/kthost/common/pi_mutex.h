// A mutex with priority inheritance (PTHREAD_PRIO_INHERIT): while a
// real-time thread waits for it, the thread that holds it runs at the
// waiter's priority. Without it a SCHED_FIFO hold-answering thread that needs
// a lock the main thread holds waits for as long as busy vCPU threads keep
// the main thread off the CPU (agent bench: 2.6-5.7 ms, three busy guests on
// 2 cores). Lockable: use it with std::lock_guard / std::unique_lock.
#pragma once

#include <pthread.h>

namespace kt {

class PiMutex {
 public:
  PiMutex();
  ~PiMutex();
  PiMutex(const PiMutex&) = delete;
  PiMutex& operator=(const PiMutex&) = delete;

  void lock();
  void unlock();
  bool try_lock();

 private:
  pthread_mutex_t m_;
};

}  // namespace kt
