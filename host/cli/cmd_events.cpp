// kthost events: stream the guest's sideband events live.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "kthost/trace/loss_counters.h"
#include "target.h"
#include "kthost/common/strings.h"
#include "kthost/sideband/channel.h"
#include "kthost/sideband/event_log.h"
#include "kthost/vm/vm_description.h"
#include "kthost_shared.h"

namespace kt::cli {
namespace {

const char* kName = "events";
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

void print_summary(const EventLog& log, const SidebandDecoder& dec, bool json) {
  const auto& st = dec.stats();
  // The same counters and names as kthost trace's summary (no guard here).
  LossCounters losses = LossCounters::collect(log, st, TextSaverStats{}, 0);
  if (json) {
    nlohmann::json j = {{"kind", "summary"},
                        {"events", log.size()},
                        {"text_pokes", log.count("text_poke")},
                        {"ksymbols", log.count("ksymbol")},
                        {"bpf_events", log.count("bpf")},
                        {"module_loads", log.count("module_load")},
                        {"module_unloads", log.count("module_unload")},
                        {"frames", st.frames},
                        {"bytes", st.bytes},
                        {"skipped_bytes", st.skipped_bytes},
                        {"log_dropped", log.dropped()}};
    j.update(losses.to_json());
    if (const auto* hb = log.last_heartbeat())
      j["guest"] = {{"frames_sent", hb->frames_sent}, {"perf_records", hb->perf_records},
                    {"text_pokes", hb->text_pokes}, {"lost_records", hb->lost_records},
                    {"queue_dropped", hb->queue_dropped}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::fprintf(stderr, "summary: %zu events (%zu text_poke, %zu ksymbol, %zu bpf, %zu module load, %zu unload); "
                       "%lu frames, %s; %s\n",
               log.size(), log.count("text_poke"), log.count("ksymbol"), log.count("bpf"), log.count("module_load"),
               log.count("module_unload"), static_cast<unsigned long>(st.frames), human_bytes(st.bytes).c_str(),
               losses.describe().c_str());
  for (const auto& e : dec.recent_errors())
    std::fprintf(stderr, "  decode error at stream offset %lu: %s\n", static_cast<unsigned long>(e.offset),
                 e.reason.c_str());
}

int run(const std::vector<std::string>& args) {
  Options opt;
  target_options(opt);
  opt.value("duration", "SECONDS", "stop after this long (default: until Ctrl-C)");
  opt.value("max-events", "N", "stop after N events");
  opt.flag("json", "print one JSON object per line");
  opt.flag("quiet", "print only the summary");
  if (auto exit_status = parse_command_line(opt, kName, args)) return *exit_status;
  auto target = open_target(opt, TargetNeeds{.monitor = false});
  if (!target) return fail(kName, target.error());
  const VmDescription* vm = &target->vm;
  if (vm->channel.empty())
    return fail(kName, Error(ErrorCode::Unsupported, target->label + " has no " KTHOST_PORT_SIDEBAND " channel"));
  double duration = 0;
  if (auto d = opt.get("duration")) duration = std::atof(d->c_str());
  uint64_t max_events = 0;
  if (auto m = opt.get("max-events")) {
    auto v = parse_u64(*m);
    if (!v) return fail(kName, Error(ErrorCode::InvalidArgument, "--max-events needs a number"));
    max_events = *v;
  }
  bool json = opt.has("json"), quiet = opt.has("quiet");
  auto channel = SidebandChannel::connect(vm->channel);
  if (!channel) return fail(kName, channel.error());
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  EventLog log;
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (!g_stop) {
    if (duration > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= duration)
      break;
    auto events = channel->poll(std::chrono::milliseconds(100));
    if (!events) {
      std::fprintf(stderr, "kthost events: %s\n", events.error().message.c_str());
      status = 1;
      break;
    }
    size_t first = log.size();
    log.append(std::move(*events));
    if (!quiet)
      for (size_t i = first; i < log.size(); ++i) {
        const auto& ev = log.events()[i];
        std::printf("%s\n", json ? to_json(ev).c_str() : describe(ev).c_str());
      }
    std::fflush(stdout);
    if (max_events && log.size() >= max_events) break;
  }
  print_summary(log, channel->decoder(), json);
  return status;
}

CommandRegistration reg({kName, "stream the guest's sideband events (ksymbol, bpf, text_poke, modules, losses)", run});

}  // namespace
}  // namespace kt::cli
