// Benchmark: the sideband pipe end to end, guest perf rings -> ktguest ->
// virtio-serial -> kthost, during the ftrace storm (function tracer on and
// off: tens of thousands of TEXT_POKE records in a few seconds).
//
//   bench_sideband_pipe --vm vm.json [--json]
//
// Prints events/s sustained while the storm lasts, and every loss: perf ring,
// ktguest queue, sequence gaps and decode errors. Nothing is asserted.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <atomic>
#include <thread>

#include "kthost/sideband/channel.h"
#include "kthost/sideband/event_log.h"
#include "kthost/vm/guest_exec.h"
#include "kthost/vm/vm_description.h"

using namespace kt;
using Clock = std::chrono::steady_clock;

[[noreturn]] static void die(const std::string& what) {
  std::fprintf(stderr, "bench_sideband_pipe: %s\n", what.c_str());
  std::exit(1);
}

int main(int argc, char** argv) {
  std::string vm_path;
  bool json_out = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--vm") && i + 1 < argc) vm_path = argv[++i];
    else if (!std::strcmp(argv[i], "--json")) json_out = true;
  }
  if (vm_path.empty()) die("usage: bench_sideband_pipe --vm vm.json [--json]");
  auto vm = VmDescription::load(vm_path);
  if (!vm) die(vm.error().message);
  auto channel = SidebandChannel::connect(vm->channel);
  if (!channel) die(channel.error().message);
  EventLog log;
  auto pump = [&](std::chrono::milliseconds wait) {
    auto events = channel->poll(wait);
    if (!events) die(events.error().message);
    log.append(std::move(*events));
  };
  auto t0 = Clock::now();
  while (log.count("state_dump") == 0 && Clock::now() - t0 < std::chrono::seconds(120)) pump(std::chrono::milliseconds(100));
  if (log.count("state_dump") == 0) die("no state dump from ktguest");
  double dump_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // The storm runs in the guest while this thread reads.
  double storm_guest_s = 0;
  std::atomic<bool> storm_finished{false};
  std::thread storm([&] {
    auto exec = GuestExec::connect(vm->exec_channel, std::chrono::seconds(10));
    if (!exec) die(exec.error().message);
    auto t = Clock::now();
    auto r = exec->run("T=/sys/kernel/tracing; echo function > $T/current_tracer; echo nop > $T/current_tracer",
                       std::chrono::seconds(300));
    storm_guest_s = std::chrono::duration<double>(Clock::now() - t).count();
    if (!r) die(r.error().message);
    storm_finished = true;
  });
  size_t before = log.count("text_poke");
  Clock::time_point first{}, last{};
  auto quiet_since = Clock::now();
  while (true) {
    size_t n = log.count("text_poke");
    pump(std::chrono::milliseconds(50));
    if (log.count("text_poke") != n) {
      if (first == Clock::time_point{}) first = Clock::now();
      last = Clock::now();
      quiet_since = last;
    }
    if (storm_finished && Clock::now() - quiet_since > std::chrono::seconds(3)) break;
    if (Clock::now() - t0 > std::chrono::seconds(600)) break;
  }
  storm.join();
  // One more heartbeat so the guest's counters are final.
  auto hb_wait = Clock::now();
  size_t hbs = log.count("heartbeat");
  while (log.count("heartbeat") == hbs && Clock::now() - hb_wait < std::chrono::seconds(3)) pump(std::chrono::milliseconds(100));

  size_t pokes = log.count("text_poke") - before;
  double span = std::chrono::duration<double>(last - first).count();
  double rate = span > 0 ? static_cast<double>(pokes) / span : 0;
  const auto& st = channel->decoder().stats();
  const HeartbeatEvent* hb = log.last_heartbeat();
  uint64_t lost_ring = log.lost(1), lost_queue = log.lost(2);
  if (json_out) {
    nlohmann::json j = {{"state_dump_s", dump_s}, {"text_pokes", pokes}, {"storm_guest_s", storm_guest_s},
                        {"arrival_span_s", span}, {"events_per_s", rate}, {"lost_perf_ring", lost_ring},
                        {"lost_queue", lost_queue}, {"frames_missing", st.frames_missing},
                        {"decode_errors", st.errors()}, {"bytes", st.bytes},
                        {"guest_text_pokes", hb ? hb->text_pokes : 0}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("state dump (kallsyms, modules, BPF) received in %.2f s\n", dump_s);
  std::printf("ftrace storm: guest command took %.2f s; %zu TEXT_POKE events arrived over %.2f s\n", storm_guest_s,
              pokes, span);
  std::printf("sustained rate: %.0f events/s (%.2f MB/s of frames in all)\n", rate,
              static_cast<double>(st.bytes) / 1e6 / std::max(span, 1e-9));
  std::printf("guest ktguest read %lu text pokes in all (since it started)\n",
              static_cast<unsigned long>(hb ? hb->text_pokes : 0));
  std::printf("losses: perf ring %lu, ktguest queue %lu, frames missing %lu, decode errors %lu -> %s\n",
              static_cast<unsigned long>(lost_ring), static_cast<unsigned long>(lost_queue),
              static_cast<unsigned long>(st.frames_missing), static_cast<unsigned long>(st.errors()),
              lost_ring + lost_queue + st.frames_missing + st.errors() == 0 ? "target MET (nothing lost)"
                                                                             : "target MISSED");
  return 0;
}
