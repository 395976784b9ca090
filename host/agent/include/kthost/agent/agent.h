// kthost agent: one process per host that follows every libvirt domain and
// runs a DomainTracer for each one that opts in (opt_in.h).
//
// It is level-triggered: once a second (and at once after a lifecycle event)
// it lists the running domains and starts a tracer for each opted-in domain
// that has none. Events make it faster, never necessary: a missed event,
// or libvirtd restarting (the connection closes; the agent reconnects with
// back-off), loses nothing but a second.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kthost/agent/agent_config.h"
#include "kthost/agent/agent_status.h"
#include "kthost/agent/backoff.h"
#include "kthost/agent/domain_tracer.h"
#include "kthost/libvirt/libvirt_host.h"

namespace kt {

class Agent {
 public:
  using Log = std::function<void(const std::string&)>;
  // Creates the output directory. Errors: it cannot be created. libvirtd
  // need not be up yet: the agent connects when it can.
  static Result<std::unique_ptr<Agent>> open(AgentConfig config, Log log);
  ~Agent();  // stops every tracer: each bundle is closed cleanly

  // Follows the host until `stop` is non-zero.
  void run(const std::atomic<int>& stop);
  AgentStatus status() const;

 private:
  Agent(AgentConfig config, Log log);
  void reconcile();
  void connect_if_needed();
  void handle_events();
  void update_gauges();

  AgentConfig config_;
  Log log_;
  AgentGauges gauges_;
  std::chrono::steady_clock::time_point started_;

  std::unique_ptr<LibvirtHost> host_;
  Backoff connect_backoff_;
  std::chrono::steady_clock::time_point next_connect_{};
  uint64_t reconnects_ = 0, connects_ = 0;
  std::string connect_error_;

  // Events from libvirt's event thread, handled on the agent's.
  std::mutex events_mu_;
  std::deque<LifecycleEvent> events_;
  std::atomic<uint64_t> events_seen_{0};
  std::atomic<bool> events_pending_{false};

  mutable std::mutex mu_;  // guards what status() reads
  std::map<std::string, std::unique_ptr<DomainTracer>> tracers_;
  std::vector<DomainStatus> ended_;  // the last 64 tracers that ended
  std::map<std::string, std::string> skipped_;  // running, not opted in: why
};

}  // namespace kt
