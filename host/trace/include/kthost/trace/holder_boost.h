// While a guest CPU waits on a hold (ktguard keeps an unload from freeing
// text until kthost has saved it), its vCPU thread runs under SCHED_FIFO.
//
// The hold is kthost's doing, and the holder spins on its ack word for it.
// On a host whose CPUs the guests' vCPU threads oversubscribe (three busy TCG
// guests on two cores), a holder preempted by another guest's vCPU waits out
// that one's whole time slice, 3-10 ms, with the word already stored: the
// hold's time then comes from the host's scheduler, not from kthost. Raised
// from the moment kthost sees the hold until it is gone from ktguard's
// mirror, the holder is never preempted by a normal task, and at most
// kMaxBoost in all (a hold whose word poll gave up sleeps in the guest, and
// its vCPU runs other guest work meanwhile, which must not keep the boost).
//
// The priority is below that of kthost's hold-answering threads, which
// therefore still run when boosted holders fill every CPU. A vCPU thread
// that already runs under a real-time policy (libvirt's <vcpusched>) is left
// alone, and said so once. A kthost killed with SIGKILL inside a boost (up
// to kMaxBoost a hold) leaves its thread raised: lower_leftovers() sets such
// threads back when the VM's configuration asks for no real-time vCPUs. Not
// thread-safe: one owner (the mirror's poller).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kthost/common/thread_setup.h"
#include "kthost/vm/monitor.h"

namespace kt {

struct HolderBoostStats {
  uint64_t boosts = 0;     // vCPU threads raised
  uint64_t timeouts = 0;   // ... and lowered after kMaxBoost, their hold still waiting
  uint64_t errors = 0;     // raising or lowering failed (said once)
  uint64_t no_thread = 0;  // holds on a guest CPU with no known vCPU thread
  uint64_t leftovers = 0;  // threads found raised by an earlier kthost, set back
  double max_ms = 0;       // the longest boost
};

class HolderBoost {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kMaxBoost{5};

  // threads: the domain's vCPU threads, by guest CPU (host thread ids);
  // priority: SCHED_FIFO 1..99. notice: what failed, said once.
  HolderBoost(std::vector<VcpuThread> threads, int priority, std::function<void(const std::string&)> notice);
  ~HolderBoost();  // every thread back as it was
  HolderBoost(const HolderBoost&) = delete;
  HolderBoost& operator=(const HolderBoost&) = delete;

  // Only for a VM whose configuration runs no vCPU under a real-time policy:
  // every vCPU thread under SCHED_FIFO at this boost's priority was left so
  // by an earlier kthost and goes back to normal scheduling (said, counted).
  void lower_leftovers();
  // Hold `id` seen waiting on guest CPU `cpu`: its vCPU thread is raised.
  void hold_seen(uint64_t id, uint32_t cpu, Clock::time_point now);
  // The holds still waiting (ktguard's mirror, just read): each raised
  // thread with none of its holds among them goes back, and so does any
  // raised for kMaxBoost.
  void holds_waiting(const std::set<uint64_t>& waiting, Clock::time_point now);
  void end_all(Clock::time_point now);
  bool any_raised() const { return !raised_.empty(); }
  const HolderBoostStats& stats() const { return stats_; }

 private:
  struct Raised {
    int tid = 0;
    ThreadScheduling before;
    Clock::time_point since;
    std::set<uint64_t> ids;
  };
  void lower(std::map<uint32_t, Raised>::iterator it, Clock::time_point now);
  void say_once(const std::string& text);

  std::map<uint32_t, int> tids_;  // guest CPU -> vCPU thread
  int priority_;
  std::function<void(const std::string&)> notice_;
  std::map<uint32_t, Raised> raised_;  // by guest CPU
  std::set<uint32_t> left_alone_;      // already real-time: said once
  bool error_said_ = false;
  HolderBoostStats stats_;
};

}  // namespace kt
