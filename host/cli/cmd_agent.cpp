// kthost agent: options, signals and the status client. The work is the
// Agent (host/agent); docs/AGENT.md says how it runs on a host and in KubeVirt.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "command.h"
#include "target.h"
#include "kthost/agent/agent.h"
#include "kthost/agent/status_server.h"
#include "kthost/common/strings.h"

namespace kt::cli {
namespace {

const char* kName = "agent";
std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

void log_line(const std::string& text) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s kthost agent: %s\n", stamp, text.c_str());
}

Result<uint64_t> size_option(const Options& opt, const std::string& name) {
  auto v = opt.get(name);
  return v ? parse_byte_size(*v, "--" + name) : Result<uint64_t>(uint64_t{0});
}

Result<double> seconds_option(const Options& opt, const std::string& name, double fallback) {
  auto v = opt.get(name);
  if (!v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end || !(d >= 0) || d > 1e9)
    return Error(ErrorCode::InvalidArgument, "--" + name + " takes seconds, not '" + sanitize_name(*v, 40) + "'");
  return d;
}

int status_client(const Options& opt) {
  auto socket = opt.get("socket");
  if (!socket && opt.get("output")) socket = *opt.get("output") + "/agent.sock";
  if (!socket) return fail(kName, Error(ErrorCode::InvalidArgument, "--status needs --socket PATH (or --output DIR)"));
  const char* path = opt.has("metrics") ? "/metrics" : opt.has("json") ? "/status.json" : "/status";
  auto body = query_agent(*socket, path);
  if (!body) return fail(kName, body.error());
  std::fwrite(body->data(), 1, body->size(), stdout);
  return 0;
}

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.value("connect", "URI", "libvirt URI to follow (default qemu:///system; any local socket, e.g. "
                              "qemu+unix:///system?socket=PATH for KubeVirt's per-VM virtqemud)");
  opt.value("output", "DIR", "bundles go to DIR/<domain>/<boot-id>/<NNN>/ (-o)");
  opt.value("match", "GLOBS", "comma-separated globs on the domain name or its kthost metadata tag (default: all)");
  opt.value("rotate-size", "SIZE", "start a new bundle past SIZE of PT and text (e.g. 2G)");
  opt.value("rotate-time", "SECONDS", "start a new bundle after this long");
  opt.value("max-disk", "SIZE", "budget: all bundles under DIR");
  opt.value("max-domain-disk", "SIZE", "budget: one domain's bundles");
  opt.value("max-pt-rate", "SIZE", "budget: one domain's PT bytes per second (5 s window)");
  opt.value("pt-cooldown", "SECONDS", "how long a domain over its PT rate stays untraced (default 30)");
  opt.value("max-memory", "SIZE", "budget: the agent's resident memory");
  opt.value("retry-max", "SECONDS", "longest back-off between tries of a failing domain (default 60)");
  opt.value("socket", "PATH", "status socket (default DIR/agent.sock)");
  opt.value("metrics-listen", "HOST:PORT", "also serve /metrics and /status on a loopback TCP port");
  opt.flag("status", "ask a running agent (--socket or --output) and print its status");
  opt.flag("json", "with --status: JSON");
  opt.flag("metrics", "with --status: the Prometheus metrics");
  trace_session_options(opt);
  std::vector<std::string> a = args;
  for (auto& s : a) if (s == "-o") s = "--output";
  if (auto exit_status = parse_command_line(opt, kName, a)) return *exit_status;
  if (opt.has("status")) return status_client(opt);

  AgentConfig config;
  config.uri = opt.get_or("connect", "");
  config.output_dir = opt.get_or("output", "");
  if (config.output_dir.empty()) return fail(kName, Error(ErrorCode::InvalidArgument, "--output DIR is required"));
  const std::string match = opt.get_or("match", "");
  for (auto g : split(match, ','))
    if (!trim(g).empty()) config.match.emplace_back(trim(g));
  auto rotate_size = size_option(opt, "rotate-size");
  auto rotate_time = seconds_option(opt, "rotate-time", 0);
  auto max_disk = size_option(opt, "max-disk");
  auto max_domain = size_option(opt, "max-domain-disk");
  auto max_rate = size_option(opt, "max-pt-rate");
  auto max_memory = size_option(opt, "max-memory");
  auto cooldown = seconds_option(opt, "pt-cooldown", 30);
  auto retry = seconds_option(opt, "retry-max", 60);
  for (const auto* r : {&rotate_size, &max_disk, &max_domain, &max_rate, &max_memory})
    if (!*r) return fail(kName, r->error());
  for (const auto* r : {&rotate_time, &cooldown, &retry})
    if (!*r) return fail(kName, r->error());
  config.rotation = {*rotate_size, *rotate_time};
  config.budgets = {*max_disk, *max_domain, *max_rate, *max_memory, *cooldown};
  config.retry_max_seconds = std::max(1.0, *retry);
  // Each bundle gets its own directory; this one only passes the check.
  auto trace = parse_trace_options(trace_option_words(opt, config.output_dir));
  if (!trace) return fail(kName, trace.error());
  config.trace = *trace;

  ::signal(SIGINT, on_signal), ::signal(SIGTERM, on_signal), ::signal(SIGPIPE, SIG_IGN);
  std::string socket = opt.get_or("socket", config.output_dir + "/agent.sock");
  auto agent = Agent::open(config, log_line);
  if (!agent) return fail(kName, agent.error());
  Agent* raw = agent->get();
  auto server = StatusServer::start(socket, opt.get_or("metrics-listen", ""), [raw] { return raw->status(); });
  if (!server) return fail(kName, server.error());
  log_line("status on " + socket + (opt.get("metrics-listen") ? ", metrics on " + *opt.get("metrics-listen") : "") +
           "; bundles under " + config.output_dir);
  (*agent)->run(g_signal);
  log_line(std::string("stopping on ") + (g_signal == SIGINT ? "SIGINT" : "SIGTERM") + ": closing every bundle");
  server->reset();
  agent->reset();
  log_line("stopped");
  return 0;
}

CommandRegistration reg({kName, "follow every libvirt domain on this host and trace each one that opts in", run});

}  // namespace
}  // namespace kt::cli
