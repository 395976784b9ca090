// kthost trace: options, signals and the status line. The work is
// TraceSession (host/trace); the bundle's layout is docs/BUNDLE.md.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "command.h"
#include "target.h"
#include "kthost/common/strings.h"
#include "kthost/trace/guest_workload.h"
#include "kthost/trace/trace_session.h"

namespace kt::cli {
namespace {

const char* kName = "trace";
std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }
void say(const std::string& text) { std::fprintf(stderr, "\nkthost trace: %s\n", text.c_str()); }

int run(const std::vector<std::string>& args) {
  Options opt;
  target_options(opt);
  opt.value("output", "DIR", "bundle directory to create (-o; default NAME-DATE-TIME here)");
  opt.value("duration", "SECONDS", "stop after this long (default: Ctrl-C, SIGTERM, or the end of CMD)");
  trace_session_options(opt);
  opt.value("timeout", "SECONDS", "with -- CMD: the guest kills CMD after this long (default 3600)");
  opt.flag("json", "print the summary as JSON on stdout");
  opt.allow_rest("CMD...", "run CMD in the guest (sh -c) and trace exactly while it runs; exit with its status");
  std::vector<std::string> a = args;
  for (auto& s : a) if (s == "-o") s = "--output";
  if (auto exit_status = parse_command_line(opt, kName, a)) return *exit_status;
  auto target = open_target(opt);
  if (!target) return fail(kName, target.error());
  auto o = parse_trace_options(trace_option_words(
      opt, opt.get_or("output", default_trace_dir(target->vm.name, std::chrono::system_clock::now()))));
  auto timeout = parse_u64(opt.get_or("timeout", "3600"), 10);
  if (!o || !timeout) return fail(kName, !o ? o.error() : Error(ErrorCode::InvalidArgument, "--timeout takes seconds"));
  o->notice = say;
  o->pt_at_open = opt.rest().empty();  // with CMD: PT from right before CMD starts
  const Target& t = *target;
  ::signal(SIGINT, on_signal), ::signal(SIGTERM, on_signal), ::signal(SIGPIPE, SIG_IGN);
  TraceTarget trace_target{t.vm, t.monitor.get(), t.label, [&t] { return t.check_alive(); }, {}};
  if (t.domain) {
    trace_target.vcpu_threads = t.domain->vcpu_threads();
    trace_target.real_time_vcpus = t.domain->xml().real_time_vcpus;
  }
  auto session = TraceSession::open(trace_target, *o);
  if (!session) return fail(kName, session.error());
  std::fprintf(stderr, "kthost trace: %s\n", (*session)->describe().c_str());
  std::unique_ptr<GuestWorkload> workload;
  if (!opt.rest().empty()) {
    if (!(*session)->wait_ready(std::chrono::seconds(60)))
      return fail(kName, Error(ErrorCode::Timeout, "the guest helper did not send its state within 60 s"));
    if (auto started = (*session)->start_pt(); !started) return fail(kName, started.error());
    auto w = GuestWorkload::start(t.vm.exec_channel, opt.rest(), std::chrono::seconds(*timeout));
    if (!w) return fail(kName, w.error().with_context("starting the command in the guest"));
    workload = std::move(*w);
  }
  double duration = std::atof(opt.get_or("duration", "0").c_str());
  std::string reason = "duration";
  for (double last = 0; (*session)->step();) {
    auto p = (*session)->progress();
    if (g_signal) { reason = g_signal == SIGINT ? "SIGINT" : "SIGTERM"; break; }
    if (workload && workload->done()) { reason = "command ended"; break; }
    if (duration > 0 && p.seconds >= duration) break;
    if (::isatty(2) && p.seconds - last >= 1 && (last = p.seconds) > 0)
      std::fprintf(stderr, "\r%s   ", p.status_line().c_str());
  }
  auto summary = (*session)->finish(reason);
  if (!summary) return fail(kName, summary.error());
  if (opt.has("json")) std::printf("%s\n", summary->to_json().dump().c_str());
  std::fprintf(stderr, "\nkthost trace: %s\nkthost trace: bundle %s\n", summary->one_line().c_str(), o->out_dir.c_str());
  if (!workload) return (*session)->failed() ? 1 : 0;
  if (!workload->done()) return say("stopped before the command ended (it goes on in the guest)"), 128 + g_signal;
  if (!workload->result()) return fail(kName, workload->result().error().with_context("the command in the guest"));
  std::fwrite(workload->result()->output.data(), 1, workload->result()->output.size(), stdout);
  return workload->exit_status();
}

CommandRegistration reg({kName, "trace a running guest's kernel (PT, sideband, guard holds, text) into a bundle", run});

}  // namespace
}  // namespace kt::cli
