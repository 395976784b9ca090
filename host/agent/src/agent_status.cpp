#include "kthost/agent/agent_status.h"

#include <algorithm>
#include <cstdio>

#include "kthost/common/strings.h"

namespace kt {
namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / double(1 << 20));
  return buf;
}

uint64_t budget_stops_total(const DomainStatus& d) {
  uint64_t n = 0;
  for (const auto& [kind, count] : d.budget_stops) n += count;
  return n;
}

// One metric family: HELP, TYPE, then its samples.
class Family {
 public:
  Family(std::string& out, const char* name, const char* type, const char* help) : out_(out), name_(name) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  Family& sample(const std::string& labels, double value) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", value);
    out_ += name_ + (labels.empty() ? "" : "{" + labels + "}") + " " + buf + "\n";
    return *this;
  }

 private:
  std::string& out_;
  std::string name_;
};

std::string domain_label(const DomainStatus& d) { return "domain=\"" + prometheus_label_value(d.name) + "\""; }

}  // namespace

std::string prometheus_label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

nlohmann::json AgentStatus::to_json() const {
  nlohmann::json j = {{"uri", uri},
                      {"libvirt_connected", libvirt_connected},
                      {"uptime_seconds", uptime_seconds},
                      {"libvirt_reconnects", libvirt_reconnects},
                      {"events_seen", events_seen},
                      {"total_disk_bytes", total_disk_bytes},
                      {"total_disk_budget", total_disk_budget},
                      {"memory_bytes", memory_bytes},
                      {"memory_budget", memory_budget},
                      {"domains", nlohmann::json::array()},
                      {"skipped", nlohmann::json::array()}};
  for (const auto& d : domains)
    j["domains"].push_back({{"name", d.name},
                            {"state", d.state},
                            {"ready", d.ready},
                            {"boot_id", d.boot_id},
                            {"bundle", d.bundle},
                            {"memory_backend", d.memory_backend},
                            {"pt_source", d.pt_source},
                            {"bundles", d.bundles},
                            {"failures", d.failures},
                            {"disk_bytes", d.disk_bytes},
                            {"pt_bytes", d.pt_bytes},
                            {"text_bytes", d.text_bytes},
                            {"events", d.events},
                            {"holds", d.holds},
                            {"lost", d.lost},
                            {"budget_stops", d.budget_stops},
                            {"untraced_seconds", d.untraced_seconds},
                            {"retry_in_seconds", d.retry_in_seconds},
                            {"last_error", d.last_error},
                            {"last_end_reason", d.last_end_reason}});
  for (const auto& s : skipped) j["skipped"].push_back({{"name", s.name}, {"why", s.why}});
  return j;
}

std::string AgentStatus::to_text() const {
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line, "kthost agent: up %.0f s, libvirt %s %s (%llu reconnects), bundles %s",
                uptime_seconds, uri.c_str(), libvirt_connected ? "connected" : "NOT connected",
                static_cast<unsigned long long>(libvirt_reconnects), mib(total_disk_bytes).c_str());
  out += line;
  if (total_disk_budget) out += " of " + mib(total_disk_budget);
  out += ", memory " + mib(memory_bytes) + (memory_budget ? " of " + mib(memory_budget) : "") + "\n";
  std::snprintf(line, sizeof line, "%-20s %-10s %-5s %-28s %5s %11s %11s %6s %6s %6s\n", "DOMAIN", "STATE", "READY",
                "BOOT", "BUNDL", "DISK", "PT", "HOLDS", "LOST", "FAILS");
  out += line;
  for (const auto& d : domains) {
    uint64_t lost = d.lost + budget_stops_total(d);
    std::snprintf(line, sizeof line, "%-20s %-10s %-5s %-28s %5llu %11s %11s %6llu %6llu %6llu\n",
                  sanitize_name(d.name, 20).c_str(), d.state.c_str(), d.ready ? "yes" : "no", d.boot_id.c_str(),
                  static_cast<unsigned long long>(d.bundles), mib(d.disk_bytes).c_str(), mib(d.pt_bytes).c_str(),
                  static_cast<unsigned long long>(d.holds), static_cast<unsigned long long>(lost),
                  static_cast<unsigned long long>(d.failures));
    out += line;
    if (!d.bundle.empty()) out += "    bundle " + d.bundle + "\n";
    for (const auto& [kind, count] : d.budget_stops)
      out += "    stopped by the " + kind + " budget " + std::to_string(count) + " time(s)\n";
    if (d.untraced_seconds > 0) {
      std::snprintf(line, sizeof line, "    untraced while running: %.1f s\n", d.untraced_seconds);
      out += line;
    }
    if (!d.last_error.empty()) out += "    last error: " + d.last_error + "\n";
    if (d.state == "ended" && !d.last_end_reason.empty()) out += "    ended: " + d.last_end_reason + "\n";
  }
  for (const auto& s : skipped) out += "not traced: " + s.name + ": " + s.why + "\n";
  return out;
}

std::string AgentStatus::to_prometheus() const {
  std::string out;
  Family(out, "kthost_agent_up_seconds", "gauge", "Seconds since the agent started.").sample("", uptime_seconds);
  Family(out, "kthost_agent_libvirt_connected", "gauge", "1 while the agent's libvirt connection is open.")
      .sample("", libvirt_connected ? 1 : 0);
  Family(out, "kthost_agent_libvirt_reconnects_total", "counter", "Times the agent reconnected to libvirt.")
      .sample("", static_cast<double>(libvirt_reconnects));
  Family(out, "kthost_agent_disk_bytes", "gauge", "Bytes of all bundles under the output directory.")
      .sample("", static_cast<double>(total_disk_bytes));
  Family(out, "kthost_agent_memory_bytes", "gauge", "The agent's resident memory.").sample("", static_cast<double>(memory_bytes));
  Family(out, "kthost_agent_skipped_domains", "gauge", "Running domains that did not opt in.")
      .sample("", double(skipped.size()));
  {
    Family f(out, "kthost_domain_tracing", "gauge", "1 while the domain's trace is recording.");
    for (const auto& d : domains)
      if (d.state != "ended") f.sample(domain_label(d), d.state == "tracing" ? 1 : 0);
  }
  struct Counter {
    const char* name;
    const char* help;
    uint64_t DomainStatus::*field;
  };
  static const Counter kCounters[] = {
      {"kthost_domain_bundles_total", "Bundles written for the domain.", &DomainStatus::bundles},
      {"kthost_domain_failures_total", "Traces of the domain that failed and were retried.", &DomainStatus::failures},
      {"kthost_domain_pt_bytes_total", "PT bytes captured for the domain.", &DomainStatus::pt_bytes},
      {"kthost_domain_text_bytes_total", "Kernel text bytes saved for the domain.", &DomainStatus::text_bytes},
      {"kthost_domain_events_total", "Sideband events received from the domain.", &DomainStatus::events},
      {"kthost_domain_holds_total", "Guard holds of the domain answered.", &DomainStatus::holds},
      {"kthost_domain_lost_total", "Losses the domain's traces counted (PT, sideband, guard).", &DomainStatus::lost},
  };
  // Counters sum over every tracer a domain had (restarts keep counting).
  std::map<std::string, DomainStatus> by_name;
  for (const auto& d : domains) {
    DomainStatus& t = by_name[d.name];
    t.name = d.name;
    for (const auto& c : kCounters) t.*(c.field) += d.*(c.field);
    for (const auto& [kind, n] : d.budget_stops) t.budget_stops[kind] += n;
    t.untraced_seconds += d.untraced_seconds;
    t.disk_bytes = std::max(t.disk_bytes, d.disk_bytes);  // each tracer measures the whole domain directory
  }
  for (const auto& c : kCounters) {
    Family f(out, c.name, "counter", c.help);
    for (const auto& [name, d] : by_name) f.sample(domain_label(d), double(d.*(c.field)));
  }
  {
    Family f(out, "kthost_domain_budget_stops_total", "counter", "Times a budget stopped the domain's trace (a loss).");
    for (const auto& [name, d] : by_name)
      for (const auto& [kind, n] : d.budget_stops)
        f.sample(domain_label(d) + ",budget=\"" + prometheus_label_value(kind) + "\"", static_cast<double>(n));
  }
  {
    Family f(out, "kthost_domain_untraced_seconds_total", "counter", "Seconds the domain ran untraced (budgets, retries).");
    for (const auto& [name, d] : by_name) f.sample(domain_label(d), d.untraced_seconds);
  }
  {
    Family f(out, "kthost_domain_disk_bytes", "gauge", "Bytes of the domain's bundles.");
    for (const auto& [name, d] : by_name) f.sample(domain_label(d), static_cast<double>(d.disk_bytes));
  }
  return out;
}

}  // namespace kt
