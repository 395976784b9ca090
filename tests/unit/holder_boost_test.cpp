// HolderBoost on real threads of this process standing in for vCPU threads:
// the kernel's own view of each thread's policy (sched_getscheduler) is what
// is checked. Raising a thread needs CAP_SYS_NICE; without it the test checks
// that the failure is counted and said once.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "kthost/common/pi_mutex.h"
#include "kthost/trace/holder_boost.h"

namespace kt {
namespace {

using Clock = HolderBoost::Clock;

// A thread that waits until the test ends, with its id known.
class ParkedThread {
 public:
  ParkedThread() {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      tid_ = static_cast<int>(::syscall(SYS_gettid));
      cv_.notify_all();
      cv_.wait(lock, [this] { return done_; });
    });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return tid_ != 0; });
  }
  ~ParkedThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int tid() const { return tid_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  int tid_ = 0;
  std::thread thread_;
};

int policy_of(int tid) { return ::sched_getscheduler(tid) & ~SCHED_RESET_ON_FORK; }

TEST(HolderBoost, AHoldersThreadRunsUnderFifoUntilItsLastHoldIsGoneAndKeepsItsNice) {
  if (geteuid() != 0) GTEST_SKIP() << "raising a thread needs CAP_SYS_NICE";
  ParkedThread vcpu0, vcpu1;
  ASSERT_EQ(::setpriority(PRIO_PROCESS, vcpu0.tid(), 3), 0);
  std::vector<std::string> notices;
  {
    HolderBoost b({{0, vcpu0.tid()}, {1, vcpu1.tid()}}, 1, [&](const std::string& s) { notices.push_back(s); });
    const auto t0 = Clock::now();
    b.hold_seen(10, 0, t0);
    EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_FIFO);
    sched_param p{};
    ASSERT_EQ(::sched_getparam(vcpu0.tid(), &p), 0);
    EXPECT_EQ(p.sched_priority, 1);
    EXPECT_EQ(policy_of(vcpu1.tid()), SCHED_OTHER);  // only the holder's CPU
    b.hold_seen(11, 0, t0);                          // a second hold on the same CPU
    b.holds_waiting({10, 11}, t0 + std::chrono::microseconds(100));
    EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_FIFO);
    b.holds_waiting({11}, t0 + std::chrono::microseconds(200));
    EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_FIFO);  // 11 still waits
    b.holds_waiting({}, t0 + std::chrono::microseconds(300));
    EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_OTHER);
    EXPECT_EQ(::getpriority(PRIO_PROCESS, vcpu0.tid()), 3);
    EXPECT_FALSE(b.any_raised());
    EXPECT_EQ(b.stats().boosts, 1u);
    EXPECT_EQ(b.stats().timeouts, 0u);
    EXPECT_NEAR(b.stats().max_ms, 0.3, 1e-6);
    // A hold on a CPU with no known thread is counted, nothing raised.
    b.hold_seen(12, 7, t0);
    EXPECT_EQ(b.stats().no_thread, 1u);
    // Raised, then the session ends: the destructor lowers it.
    b.hold_seen(13, 1, t0);
    EXPECT_EQ(policy_of(vcpu1.tid()), SCHED_FIFO);
  }
  EXPECT_EQ(policy_of(vcpu1.tid()), SCHED_OTHER);
  EXPECT_TRUE(notices.empty());
}

TEST(HolderBoost, AHoldStillWaitingAfterTheLimitIsLoweredAndCounted) {
  if (geteuid() != 0) GTEST_SKIP() << "raising a thread needs CAP_SYS_NICE";
  ParkedThread vcpu0;
  HolderBoost b({{0, vcpu0.tid()}}, 1, nullptr);
  const auto t0 = Clock::now();
  b.hold_seen(20, 0, t0);
  b.holds_waiting({20}, t0 + HolderBoost::kMaxBoost - std::chrono::microseconds(1));
  EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_FIFO);
  b.holds_waiting({20}, t0 + HolderBoost::kMaxBoost);
  EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_OTHER);
  EXPECT_EQ(b.stats().timeouts, 1u);
  // The same hold, still waiting, is not raised again by later polls.
  b.holds_waiting({20}, t0 + 2 * HolderBoost::kMaxBoost);
  EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_OTHER);
  EXPECT_EQ(b.stats().boosts, 1u);
}

TEST(HolderBoost, AThreadAlreadyRealTimeIsLeftAsItIsAndSaidOnce) {
  if (geteuid() != 0) GTEST_SKIP() << "making a thread real-time needs CAP_SYS_NICE";
  ParkedThread vcpu0;
  sched_param p{};
  p.sched_priority = 5;
  ASSERT_EQ(::sched_setscheduler(vcpu0.tid(), SCHED_RR, &p), 0);
  std::vector<std::string> notices;
  {
    HolderBoost b({{0, vcpu0.tid()}}, 1, [&](const std::string& s) { notices.push_back(s); });
    b.hold_seen(1, 0, Clock::now());
    b.hold_seen(2, 0, Clock::now());
    EXPECT_FALSE(b.any_raised());
    EXPECT_EQ(b.stats().boosts, 0u);
  }
  EXPECT_EQ(policy_of(vcpu0.tid()), SCHED_RR);
  ASSERT_EQ(::sched_getparam(vcpu0.tid(), &p), 0);
  EXPECT_EQ(p.sched_priority, 5);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("already runs under a real-time policy (priority 5)"), std::string::npos) << notices[0];
}

// A kthost killed inside a boost leaves the thread raised; the next session
// for a VM that asks for no real-time vCPUs sets it back. Other real-time
// threads (another priority) are not its doing and stay.
TEST(HolderBoost, AThreadLeftRaisedAtItsPriorityIsSetBack) {
  if (geteuid() != 0) GTEST_SKIP() << "making a thread real-time needs CAP_SYS_NICE";
  ParkedThread left, other;
  sched_param p{};
  p.sched_priority = 1;
  ASSERT_EQ(::sched_setscheduler(left.tid(), SCHED_FIFO, &p), 0);
  p.sched_priority = 7;
  ASSERT_EQ(::sched_setscheduler(other.tid(), SCHED_FIFO, &p), 0);
  std::vector<std::string> notices;
  HolderBoost b({{0, left.tid()}, {1, other.tid()}}, 1, [&](const std::string& s) { notices.push_back(s); });
  b.lower_leftovers();
  EXPECT_EQ(policy_of(left.tid()), SCHED_OTHER);
  EXPECT_EQ(policy_of(other.tid()), SCHED_FIFO);
  EXPECT_EQ(b.stats().leftovers, 1u);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("left raised by a kthost that did not end cleanly"), std::string::npos) << notices[0];
  // It is then raised and lowered as any other.
  b.hold_seen(1, 0, Clock::now());
  EXPECT_EQ(policy_of(left.tid()), SCHED_FIFO);
  b.holds_waiting({}, Clock::now());
  EXPECT_EQ(policy_of(left.tid()), SCHED_OTHER);
}

// A thread that has exited (QEMU gone): counted, said once, nothing raised.
TEST(HolderBoost, AThreadThatIsGoneIsAnErrorSaidOnce) {
  int gone = 0;
  std::thread([&] { gone = static_cast<int>(::syscall(SYS_gettid)); }).join();
  std::vector<std::string> notices;
  HolderBoost b({{0, gone}}, 1, [&](const std::string& s) { notices.push_back(s); });
  b.hold_seen(1, 0, Clock::now());
  b.hold_seen(2, 0, Clock::now());
  EXPECT_FALSE(b.any_raised());
  EXPECT_EQ(b.stats().errors, 2u);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("thread " + std::to_string(gone)), std::string::npos) << notices[0];
}

}  // namespace
}  // namespace kt

namespace kt {
namespace {

// The kernel's effective priority of a thread (/proc/.../sched "prio": 120
// for nice 0, 99 - P under SCHED_FIFO P), which shows inheritance.
int effective_prio(int tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/sched");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("prio", 0) == 0) return std::stoi(line.substr(line.find(':') + 1));
  return -1;
}

// While a SCHED_FIFO thread waits for a PiMutex, the normal thread that holds
// it runs at the waiter's priority, and drops back when it unlocks.
TEST(PiMutex, TheHolderRunsAtAWaitingRealTimeThreadsPriority) {
  if (geteuid() != 0) GTEST_SKIP() << "a SCHED_FIFO waiter needs CAP_SYS_NICE";
  PiMutex m;
  std::atomic<int> holder_tid{0};
  std::atomic<bool> waiter_done{false};
  m.lock();
  holder_tid = static_cast<int>(::syscall(SYS_gettid));
  const int before = effective_prio(holder_tid);
  std::thread waiter([&] {
    ASSERT_TRUE(set_this_thread_fifo(2));
    std::lock_guard<PiMutex> lock(m);
    waiter_done = true;
  });
  int during = before;
  for (int i = 0; i < 2000 && during == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    during = effective_prio(holder_tid);
  }
  EXPECT_EQ(during, 99 - 2);  // inherited from the waiter
  EXPECT_FALSE(waiter_done);
  m.unlock();
  waiter.join();
  EXPECT_TRUE(waiter_done);
  EXPECT_EQ(effective_prio(holder_tid), before);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

}  // namespace
}  // namespace kt
