// What the agent reports about itself and each domain: a plain snapshot,
// rendered for people (text), machines (JSON) and monitoring (Prometheus text
// exposition format, version 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kt {

// One domain's tracer. `state` is a TracerState name (domain_tracer.h).
struct DomainStatus {
  std::string name, state, boot_id, bundle, memory_backend, pt_source;
  std::string last_error, last_end_reason;
  bool ready = false;  // the guest helper has sent its state: holds are answered
  uint64_t bundles = 0, failures = 0;
  uint64_t disk_bytes = 0, pt_bytes = 0, text_bytes = 0, events = 0, holds = 0;
  uint64_t lost = 0;  // the sessions' own losses (PT, sideband, guard), all bundles
  std::map<std::string, uint64_t> budget_stops;  // budget kind -> times it stopped this domain
  double untraced_seconds = 0;  // running but not traced: budgets and back-off
  double retry_in_seconds = 0;  // in back-off: the next try
};

struct SkippedDomain {
  std::string name, why;
};

struct AgentStatus {
  std::string uri;
  bool libvirt_connected = false;
  double uptime_seconds = 0;
  uint64_t libvirt_reconnects = 0, events_seen = 0;
  uint64_t total_disk_bytes = 0, memory_bytes = 0;
  uint64_t total_disk_budget = 0, memory_budget = 0;
  std::vector<DomainStatus> domains;   // traced now, or ended and kept for the record
  std::vector<SkippedDomain> skipped;  // running, not opted in, with why

  nlohmann::json to_json() const;
  std::string to_text() const;
  std::string to_prometheus() const;
};

// A Prometheus label value: backslash, double quote and newline escaped.
std::string prometheus_label_value(const std::string& text);

}  // namespace kt
