#include "kthost/common/pi_mutex.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kt {
namespace {

// A failure here is a programming error (an unlock by another thread, a
// destroyed mutex): say which and stop, as std::mutex's undefined behaviour
// would not.
void check(int err, const char* what) {
  if (err == 0) return;
  std::fprintf(stderr, "kthost: PiMutex: %s: %s\n", what, std::strerror(err));
  std::abort();
}

}  // namespace

PiMutex::PiMutex() {
  pthread_mutexattr_t attr;
  check(pthread_mutexattr_init(&attr), "pthread_mutexattr_init");
  check(pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT), "pthread_mutexattr_setprotocol(PRIO_INHERIT)");
  check(pthread_mutex_init(&m_, &attr), "pthread_mutex_init");
  pthread_mutexattr_destroy(&attr);
}

PiMutex::~PiMutex() { pthread_mutex_destroy(&m_); }

void PiMutex::lock() { check(pthread_mutex_lock(&m_), "lock"); }
void PiMutex::unlock() { check(pthread_mutex_unlock(&m_), "unlock"); }
bool PiMutex::try_lock() {
  int err = pthread_mutex_trylock(&m_);
  if (err == EBUSY) return false;
  check(err, "trylock");
  return true;
}

}  // namespace kt
