#include "kthost/agent/agent.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <thread>

#include "kthost/agent/budget.h"
#include "kthost/agent/opt_in.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/libvirt/domain_xml.h"

namespace kt {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
constexpr size_t kEndedKept = 64;

uint64_t resident_bytes() {
  auto statm = read_file("/proc/self/statm", 256);
  if (!statm) return 0;
  auto words = split(trim(*statm), ' ');
  if (words.size() < 2) return 0;
  auto pages = parse_u64(words[1], 10);
  return pages ? *pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

Agent::Agent(AgentConfig config, Log log)
    : config_(std::move(config)), log_(std::move(log)), started_(Clock::now()), connect_backoff_(30) {}

Result<std::unique_ptr<Agent>> Agent::open(AgentConfig config, Log log) {
  if (config.output_dir.empty()) return Error(ErrorCode::InvalidArgument, "the agent needs an output directory");
  std::error_code ec;
  fs::create_directories(config.output_dir, ec);
  if (ec) return Error(ErrorCode::Io, "creating " + config.output_dir + ": " + ec.message());
  if (config.uri.empty()) config.uri = LibvirtDomain::kDefaultUri;
  return std::unique_ptr<Agent>(new Agent(std::move(config), std::move(log)));
}

Agent::~Agent() {
  std::map<std::string, std::unique_ptr<DomainTracer>> tracers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tracers.swap(tracers_);
  }
  // Ask all first, so that they close their bundles in parallel.
  for (auto& [name, t] : tracers) t->request_stop("the agent is stopping");
  tracers.clear();
}

void Agent::connect_if_needed() {
  if (host_ && host_->alive()) return;
  if (host_) {
    log_("libvirt connection to " + config_.uri + " closed (libvirtd restarted or went away); reconnecting");
    std::lock_guard<std::mutex> lock(mu_);
    host_.reset();
  }
  if (Clock::now() < next_connect_) return;
  auto host = LibvirtHost::connect(config_.uri, [this](const LifecycleEvent& e) {
    {
      std::lock_guard<std::mutex> lock(events_mu_);
      if (events_.size() < 4096) events_.push_back(e);
    }
    events_seen_++;
    events_pending_ = true;
  });
  if (!host) {
    double delay = connect_backoff_.next();
    next_connect_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(delay * 1000));
    if (connect_error_ != host.error().message)
      log_(host.error().message + " (retrying, at most every " + std::to_string(int(delay)) + " s)");
    connect_error_ = host.error().message;
    return;
  }
  connect_backoff_.reset();
  connect_error_.clear();
  if (connects_++ > 0) reconnects_++;
  log_("following domains on " + config_.uri);
  std::lock_guard<std::mutex> lock(mu_);
  host_ = std::move(*host);
  // Tracers that backed off while libvirt was away need not wait out their delay.
  for (auto& [name, t] : tracers_) t->retry_now();
}

void Agent::handle_events() {
  std::deque<LifecycleEvent> events;
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    events.swap(events_);
    events_pending_ = false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : events) {
    auto it = tracers_.find(e.domain);
    if (it == tracers_.end()) continue;
    std::string what = std::string(lifecycle_kind_name(e.kind)) + " (" + e.detail + ")";
    switch (e.kind) {
      case LifecycleKind::Stopped:
      case LifecycleKind::Crashed:
      case LifecycleKind::MigratedAway:
        it->second->request_stop("libvirt: the domain " + what);
        break;
      case LifecycleKind::Rebooted:
        it->second->request_new_boot(what);
        break;
      case LifecycleKind::Started:
      case LifecycleKind::Other:
        break;
    }
  }
}

void Agent::reconcile() {
  // Tracers that ended leave the table (their last status is kept).
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = tracers_.begin(); it != tracers_.end();) {
      if (!it->second->ended()) {
        ++it;
        continue;
      }
      ended_.push_back(it->second->status());
      if (ended_.size() > kEndedKept) ended_.erase(ended_.begin());
      it = tracers_.erase(it);
    }
  }
  if (!host_) return;
  auto running = host_->running_domains();
  if (!running) {
    log_(running.error().message);
    return;
  }
  std::map<std::string, std::string> skipped;
  for (const auto& d : *running) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (tracers_.count(d.name)) continue;
    }
    auto xml_text = host_->domain_xml(d.name);
    if (!xml_text) continue;  // it stopped since the list
    auto xml = DomainXml::parse(*xml_text);
    if (!xml) {
      skipped[d.name] = "its XML: " + xml.error().message;
      continue;
    }
    OptInDecision decision = decide_opt_in(*xml, config_.match);
    if (!decision.trace) {
      skipped[d.name] = decision.why;
      continue;
    }
    log_("domain " + d.name + ": traced (" + decision.why + ")");
    auto tracer = std::make_unique<DomainTracer>(d.name, config_, gauges_, log_);
    std::lock_guard<std::mutex> lock(mu_);
    tracers_[d.name] = std::move(tracer);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, why] : skipped)
    if (!skipped_.count(name) || skipped_[name] != why) log_("domain " + name + ": not traced: " + why);
  skipped_ = std::move(skipped);
}

void Agent::update_gauges() {
  gauges_.total_disk_bytes = directory_bytes(config_.output_dir);
  gauges_.memory_bytes = resident_bytes();
}

void Agent::run(const std::atomic<int>& stop) {
  auto last = Clock::now() - std::chrono::seconds(1);
  while (!stop) {
    auto now = Clock::now();
    if (events_pending_ || now - last >= std::chrono::seconds(1)) {
      last = now;
      connect_if_needed();
      handle_events();
      update_gauges();
      reconcile();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

AgentStatus Agent::status() const {
  AgentStatus s;
  std::lock_guard<std::mutex> lock(mu_);
  s.uri = config_.uri;
  s.libvirt_connected = host_ && host_->alive();
  s.uptime_seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  s.libvirt_reconnects = reconnects_;
  s.events_seen = events_seen_;
  s.total_disk_bytes = gauges_.total_disk_bytes;
  s.total_disk_budget = config_.budgets.total_disk_bytes;
  s.memory_bytes = gauges_.memory_bytes;
  s.memory_budget = config_.budgets.memory_bytes;
  s.domains = ended_;
  for (const auto& [name, t] : tracers_) s.domains.push_back(t->status());
  for (const auto& [name, why] : skipped_) s.skipped.push_back({name, why});
  return s;
}

}  // namespace kt
