// The sideband against a real TCG guest running ktguest: every change to
// guest kernel text reaches the host as an event, with the right data.
#include <functional>
#include <thread>
#include <nlohmann/json.hpp>

#include "guest_checks.h"
#include "kthost/sideband/channel.h"
#include "kthost/sideband/event_log.h"
#include "ktproto.h"

namespace kt::test {
namespace {

class Sideband : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto vm = TestVm::start(VmOptions{.name = "sideband", .tcg_threads = "single"});
    ASSERT_TRUE(vm) << vm.error().message;
    vm_ = std::move(*vm);
  }
  static void TearDownTestSuite() { vm_.reset(); }

  void SetUp() override {
    ASSERT_NE(vm_, nullptr) << "the guest did not boot";
    auto ch = SidebandChannel::connect(vm_->description().channel);
    ASSERT_TRUE(ch) << ch.error().message;
    channel_ = std::make_unique<SidebandChannel>(std::move(*ch));
    // Every connection starts with HELLO and a state dump.
    ASSERT_TRUE(collect_until([&] { return log_.count("state_dump") > 0; }, 120)) << "no state dump within 120 s";
  }

  // Polls the channel into log_ until `done` or the timeout (seconds).
  bool collect_until(const std::function<bool()>& done, int timeout_s) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      auto events = channel_->poll(std::chrono::milliseconds(100));
      if (!events) {
        ADD_FAILURE() << events.error().message;
        return false;
      }
      log_.append(std::move(*events));
      if (done()) return true;
    }
    return done();
  }
  void drain(int seconds) { collect_until([] { return false; }, seconds); }

  static inline std::unique_ptr<TestVm> vm_;
  std::unique_ptr<SidebandChannel> channel_;
  EventLog log_;
};

TEST_F(Sideband, StateDumpHasKallsymsModulesAndCpus) {
  const auto& hello = std::get<HelloEvent>(log_.of_kind("hello").front()->body);
  auto release = vm_->check("uname -r");
  ASSERT_TRUE(release);
  EXPECT_EQ(hello.release, std::string(trim(*release)));
  EXPECT_EQ(hello.cpu_count, 2u);
  EXPECT_TRUE(hello.clock.valid) << "tsc=reliable should give cap_user_time_zero";
  const GuestState& state = channel_->decoder().state();
  EXPECT_GT(state.symbols.size(), 50000u);
  GuestSymbols guest = guest_symbols(*vm_);
  uint64_t stext = symbol(guest, "_stext");
  bool found = false;
  for (const auto& s : state.symbols)
    if (s.name == "_stext") found = s.addr == stext;
  EXPECT_TRUE(found) << "_stext missing or at another address in the state dump";
  auto text = vm_->check("cat /sys/module/virtio_console/sections/.text");
  ASSERT_TRUE(text);
  bool module_ok = false;
  for (const auto& m : state.modules)
    if (m.name == "virtio_console") module_ok = m.text_addr == parse_u64(trim(*text), 0).value_or(1);
  EXPECT_TRUE(module_ok) << "virtio_console missing from the state dump or with the wrong .text";
  EXPECT_EQ(state.cpus, (std::vector<uint32_t>{0, 1}));
}

TEST_F(Sideband, BpfLoadAndUnloadGiveKsymbolAndBpfEvents) {
  auto out = vm_->check("ktprobe bpf-load --insns 20 --name kt_sideband");
  ASSERT_TRUE(out) << out.error().message;
  auto info = nlohmann::json::parse(std::string(trim(*out)), nullptr, false);
  ASSERT_TRUE(info.is_object()) << *out;
  uint64_t addr = parse_u64(info["jited_addr"].get<std::string>(), 0).value_or(0);
  uint64_t len = info["jited_len"].get<uint64_t>();
  uint32_t id = info["id"].get<uint32_t>();
  std::string tag = info["tag"].get<std::string>();
  auto seen = [&](bool unregister) {
    for (const auto* ev : log_.of_kind("ksymbol")) {
      const auto& k = std::get<KsymbolEvent>(ev->body);
      if (k.addr == addr && k.unregister == unregister) return true;
    }
    return false;
  };
  ASSERT_TRUE(collect_until([&] { return seen(false) && seen(true) && log_.count("bpf") >= 2; }, 30))
      << "register/unregister of " << hex(addr) << " not both seen";
  for (const auto* ev : log_.of_kind("ksymbol")) {
    const auto& k = std::get<KsymbolEvent>(ev->body);
    if (k.addr != addr) continue;
    EXPECT_EQ(k.len, len);
    EXPECT_EQ(k.ksym_type, 1u) << "PERF_RECORD_KSYMBOL_TYPE_BPF";
    EXPECT_EQ(k.name, "bpf_prog_" + tag + "_kt_sideband");
  }
  int loads = 0, unloads = 0;
  for (const auto* ev : log_.of_kind("bpf")) {
    const auto& b = std::get<BpfEvent>(ev->body);
    if (b.id != id) continue;
    EXPECT_EQ(b.tag, tag);
    (b.load ? loads : unloads)++;
  }
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(unloads, 1);
}

TEST_F(Sideband, ModuleLoadAndUnloadCarryTextRanges) {
  auto text = vm_->check("insmod /lib/kthost-test/dummy.ko && cat /sys/module/dummy/sections/.text");
  ASSERT_TRUE(text) << text.error().message;
  auto size = vm_->check("ktprobe elf-section-size /lib/kthost-test/dummy.ko .text");
  ASSERT_TRUE(size) << size.error().message;
  ASSERT_TRUE(vm_->check("rmmod dummy"));
  uint64_t addr = parse_u64(trim(*text), 0).value_or(0);
  uint64_t text_size = parse_u64(trim(*size), 0).value_or(0);
  ASSERT_GT(text_size, 0u);
  ASSERT_TRUE(collect_until([&] { return log_.count("module_load") && log_.count("module_unload"); }, 30));
  for (const char* kind : {"module_load", "module_unload"}) {
    const auto& m = std::get<ModuleEvent>(log_.of_kind(kind).back()->body);
    EXPECT_EQ(m.name, "dummy") << kind;
    EXPECT_EQ(m.text_addr, addr) << kind;
    EXPECT_EQ(m.text_size, text_size) << kind;
  }
}

TEST_F(Sideband, EveryTextPokeArrivesOrItsLossIsCounted) {
  // The guest counts TEXT_POKE records independently (its own perf events),
  // while it toggles a static key and then the ftrace function tracer.
  std::string workload =
      "ktprobe sideband-count --seconds 40 > /tmp/count.json & sleep 1; "
      "T=/sys/kernel/tracing; echo 1 > $T/events/sched/sched_switch/enable; echo 0 > $T/events/sched/sched_switch/enable; "
      "echo function > $T/current_tracer; echo nop > $T/current_tracer; wait; cat /tmp/count.json";
  auto out = vm_->check(workload, std::chrono::seconds(180));
  ASSERT_TRUE(out) << out.error().message;
  auto count = nlohmann::json::parse(std::string(trim(*out)), nullptr, false);
  ASSERT_TRUE(count.is_object()) << *out;
  uint64_t guest_pokes = count["text_poke"].get<uint64_t>();
  ASSERT_GT(guest_pokes, 1000u) << "the function tracer should poke thousands of sites";
  EXPECT_EQ(count["lost"].get<uint64_t>(), 0u) << "the oracle's own rings overflowed";
  // ktguest's heartbeats carry its running count of TEXT_POKE records read
  // from the perf rings, enqueued in order with the pokes themselves. So the
  // pokes the host logged between the first and the last heartbeat must equal
  // the difference of those counts exactly, unless a loss was reported.
  collect_until([&] {
    const auto* hb = log_.last_heartbeat();
    return hb && hb->text_pokes >= guest_pokes && log_.count("heartbeat") >= 2;
  }, 120);
  drain(2);  // one more heartbeat after the last poke
  const HeartbeatEvent* first_hb = nullptr;
  const HeartbeatEvent* last_hb = nullptr;
  uint64_t host = 0;
  for (const auto& ev : log_.events()) {
    if (const auto* hb = std::get_if<HeartbeatEvent>(&ev.body)) {
      if (!first_hb) first_hb = hb;
      last_hb = hb;
    } else if (std::holds_alternative<TextPokeEvent>(ev.body) && first_hb) {
      ++host;
    }
  }
  ASSERT_NE(first_hb, nullptr);
  // Pokes after the last heartbeat are not in its count.
  uint64_t after_last = 0;
  for (auto it = log_.events().rbegin(); it != log_.events().rend(); ++it) {
    if (std::holds_alternative<HeartbeatEvent>(it->body)) break;
    if (std::holds_alternative<TextPokeEvent>(it->body)) ++after_last;
  }
  uint64_t guest = last_hb->text_pokes - first_hb->text_pokes;
  uint64_t counted = host - after_last;
  uint64_t lost = log_.lost(1) + log_.lost(2);
  std::printf("[          ] text pokes: ktguest read %lu between heartbeats, host got %lu; independent guest "
              "oracle %lu (lost %lu); reported lost %lu\n",
              static_cast<unsigned long>(guest), static_cast<unsigned long>(counted),
              static_cast<unsigned long>(guest_pokes), static_cast<unsigned long>(count["lost"].get<uint64_t>()),
              static_cast<unsigned long>(lost));
  if (lost == 0) {
    EXPECT_EQ(counted, guest) << "no loss was reported, so every poke ktguest read must have arrived";
  } else {
    std::printf("[          ] the guest's rings or queue overflowed: %lu records lost, reported exactly\n",
                static_cast<unsigned long>(lost));
    EXPECT_EQ(counted + lost, guest);
  }
  // Everything the oracle saw, the host saw or was told it lost; and the host
  // saw no more than that, but for the oracle's own perf events, which flip
  // static keys when it opens and closes them (seen: 0 or 6 pokes).
  EXPECT_LE(guest_pokes, counted + lost);
  EXPECT_LE(counted + lost, guest_pokes + 64) << "the host got pokes the guest kernel never made";
  for (const auto* ev : log_.of_kind("text_poke")) {
    const auto& p = std::get<TextPokeEvent>(ev->body);
    // A new trampoline is reported with no old bytes; a patched site with both.
    ASSERT_TRUE(p.old_bytes.empty() || p.old_bytes.size() == p.new_bytes.size());
    ASSERT_FALSE(p.new_bytes.empty());
  }
}

// ktguest's symbol cache: a module loaded while a host is connected makes the
// cache stale, but kallsyms is not read again (that would run in the trace)
// until no host is connected; the next connection's dump then has the
// module's symbols, at the guest's own addresses.
TEST_F(Sideband, SymbolCacheIsReadAgainOnlyWhileNoHostIsConnected) {
  auto stats = [&]() {
    auto out = vm_->check("cat /run/ktguest.stats");
    EXPECT_TRUE(out) << out.error().message;
    auto j = nlohmann::json::parse(out ? std::string(trim(*out)) : std::string("{}"), nullptr, false);
    EXPECT_TRUE(j.is_object()) << (out ? *out : "");
    return j;
  };
  auto before = stats();
  ASSERT_EQ(before.value("symbols_ready", 0), 1) << before.dump();
  ASSERT_TRUE(vm_->check("insmod /lib/kthost-test/dummy.ko"));
  drain(6);  // past the 2 s settle and a few 1 s timer rounds, with the host connected
  auto connected = stats();
  EXPECT_EQ(connected.value("symbols_stale", 0), 1) << connected.dump();
  EXPECT_EQ(connected.value("kallsyms_reads", 0), before.value("kallsyms_reads", 0))
      << "kallsyms was read again while a host was connected";
  EXPECT_EQ(connected.value("kallsyms_reads_in_session", 0), before.value("kallsyms_reads_in_session", 0));

  channel_.reset();
  nlohmann::json after;
  for (int i = 0; i < 90; ++i) {
    after = stats();
    if (after.value("kallsyms_reads", 0) > before.value("kallsyms_reads", 0) && after.value("symbols_stale", 1) == 0)
      break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EXPECT_GT(after.value("kallsyms_reads", 0), before.value("kallsyms_reads", 0))
      << "no host connected: the stale cache should have been read again: " << after.dump();
  EXPECT_EQ(after.value("kallsyms_reads_in_session", 0), before.value("kallsyms_reads_in_session", 0));

  GuestSymbols guest = guest_symbols(*vm_);
  log_ = EventLog();
  auto ch = SidebandChannel::connect(vm_->description().channel);
  ASSERT_TRUE(ch) << ch.error().message;
  channel_ = std::make_unique<SidebandChannel>(std::move(*ch));
  ASSERT_TRUE(collect_until([&] { return log_.count("state_dump") > 0; }, 120));
  const GuestState& state = channel_->decoder().state();
  size_t want = 0, have = 0;
  for (const auto& g : guest.symbols) {
    if (g.module != "dummy") continue;
    ++want;
    for (const auto& s : state.symbols)
      if (s.module == "dummy" && s.name == g.name && s.addr == g.address) {
        ++have;
        break;
      }
  }
  EXPECT_GT(want, 0u) << "the guest lists no dummy symbols";
  EXPECT_EQ(have, want) << "dummy's symbols in the new dump";
  ASSERT_TRUE(vm_->check("rmmod dummy"));
}

TEST_F(Sideband, ReaderKilledAndReconnectedGetsFreshStateAndDropReport) {
  channel_.reset();  // the host reader goes away
  auto during = vm_->exec("for i in 1 2 3; do ktprobe bpf-load --name kt_away >/dev/null; done; echo still-fine",
                          std::chrono::seconds(60));
  ASSERT_TRUE(during) << during.error().message;
  EXPECT_EQ(during->output, "still-fine\n") << "the guest must not block while no host reads the sideband";
  log_ = EventLog();
  auto ch = SidebandChannel::connect(vm_->description().channel);
  ASSERT_TRUE(ch) << ch.error().message;
  channel_ = std::make_unique<SidebandChannel>(std::move(*ch));
  ASSERT_TRUE(collect_until([&] { return log_.count("state_dump") > 0; }, 120));
  const auto* dump = log_.of_kind("state_dump").front();
  EXPECT_EQ(std::get<StateDumpEvent>(dump->body).reason, 2u) << "reason must be reconnect";
  EXPECT_EQ(log_.of_kind("hello").size(), 1u);
  // What happened while no one read is either delivered or reported as lost.
  collect_until([&] { return log_.count("bpf") >= 6 || log_.lost(2) > 0; }, 30);
  EXPECT_TRUE(log_.count("bpf") >= 6 || log_.lost(2) > 0)
      << "3 loads + 3 unloads happened while disconnected: got " << log_.count("bpf") << " bpf events and "
      << log_.lost(2) << " queue losses";
}

}  // namespace
}  // namespace kt::test

namespace kt::test {
namespace {

// While no host reads, ktguest's bounded queue overflows; when a host comes
// back it reports exactly how many frames it dropped, and that equals the
// drop count in its own counters.
TEST_F(Sideband, QueueOverflowWhileDisconnectedIsReportedOnReconnect) {
  channel_.reset();
  auto restarted = vm_->check("echo '--queue-kb 64' > /run/ktguest.args; killall ktguest; sleep 3; ps | grep -v grep | grep \"ktguest --queue-kb 64\"");
  ASSERT_TRUE(restarted) << restarted.error().message;
  auto out = vm_->check("T=/sys/kernel/tracing; echo function > $T/current_tracer; echo nop > $T/current_tracer; "
                        "sleep 2; cat /run/ktguest.stats",
                        std::chrono::seconds(180));
  ASSERT_TRUE(out) << out.error().message;
  auto stats = nlohmann::json::parse(std::string(trim(*out)), nullptr, false);
  ASSERT_TRUE(stats.is_object()) << *out;
  uint64_t dropped = stats.value("queue_dropped", uint64_t{0});
  EXPECT_GT(dropped, 0u) << "a 64 KiB queue cannot hold the ftrace storm: " << *out;
  log_ = EventLog();
  auto ch = SidebandChannel::connect(vm_->description().channel);
  ASSERT_TRUE(ch) << ch.error().message;
  channel_ = std::make_unique<SidebandChannel>(std::move(*ch));
  // The stats file was written up to a second before the last drops; the
  // heartbeats (in order with everything else) carry the exact count.
  ASSERT_TRUE(collect_until([&] { return log_.lost(KTP_LOST_QUEUE) >= dropped && log_.count("heartbeat") > 1; }, 120))
      << "reported queue losses " << log_.lost(KTP_LOST_QUEUE) << ", ktguest dropped at least " << dropped;
  EXPECT_EQ(log_.lost(KTP_LOST_QUEUE), log_.last_heartbeat()->queue_dropped);
  EXPECT_GE(log_.lost(KTP_LOST_QUEUE), dropped);
  std::printf("[          ] ktguest dropped %lu frames while no host read; the host was told %lu\n",
              static_cast<unsigned long>(dropped), static_cast<unsigned long>(log_.lost(KTP_LOST_QUEUE)));
  ASSERT_TRUE(vm_->check("rm -f /run/ktguest.args; killall ktguest; sleep 3; ps | grep -v grep | grep -q ktguest"));
}

// CPU hotplug: a CPU that goes offline and comes back is traced again.
TEST_F(Sideband, CpuHotplugIsFollowed) {
  ASSERT_TRUE(vm_->check("echo 0 > /sys/devices/system/cpu/cpu1/online; sleep 1; echo 1 > /sys/devices/system/cpu/cpu1/online; sleep 1"));
  auto out = vm_->check("taskset -c 1 ktprobe bpf-load --name kt_cpu1");
  ASSERT_TRUE(out) << out.error().message;
  ASSERT_TRUE(collect_until([&] {
    for (const auto* ev : log_.of_kind("ksymbol"))
      if (ev->cpu == 1 && std::get<KsymbolEvent>(ev->body).name.find("kt_cpu1") != std::string::npos) return true;
    return false;
  }, 30)) << "no KSYMBOL from CPU 1 after it came back online";
}

}  // namespace
}  // namespace kt::test

namespace kt::test {
namespace {

// With perf rings too small for the ftrace storm, the kernel drops records;
// each PERF_RECORD_LOST reaches the host as a LOST frame with the exact count,
// so what arrived plus what was reported lost accounts for every poke.
TEST_F(Sideband, PerfRingOverflowIsReportedWithExactCounts) {
  channel_.reset();
  auto restarted = vm_->check("echo '--ring-kb 8' > /run/ktguest.args; killall ktguest; sleep 3; "
                              "ps | grep -v grep | grep \"ktguest --ring-kb 8\"");
  ASSERT_TRUE(restarted) << restarted.error().message;
  log_ = EventLog();
  auto ch = SidebandChannel::connect(vm_->description().channel);
  ASSERT_TRUE(ch) << ch.error().message;
  channel_ = std::make_unique<SidebandChannel>(std::move(*ch));
  ASSERT_TRUE(collect_until([&] { return log_.count("state_dump") > 0; }, 120));
  // Keep reading while the guest runs the storm, so that only the rings
  // overflow. The storm runs in the background in the guest, and the test
  // polls for its end on the one exec connection (no second connection).
  auto started = vm_->check("rm -f /tmp/storm.done /tmp/count.json; "
                            "(ktprobe sideband-count --seconds 40 > /tmp/count.json & sleep 1; T=/sys/kernel/tracing; "
                            "echo function > $T/current_tracer; echo nop > $T/current_tracer; wait; "
                            "touch /tmp/storm.done) </dev/null >/tmp/storm.log 2>&1 &");
  ASSERT_TRUE(started) << started.error().message;
  std::string result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(200);
  while (std::chrono::steady_clock::now() < deadline) {
    drain(1);
    auto done = vm_->exec("test -e /tmp/storm.done", std::chrono::seconds(30));
    ASSERT_TRUE(done) << done.error().message;
    if (done->status == 0) {
      auto out = vm_->check("cat /tmp/count.json");
      ASSERT_TRUE(out) << out.error().message;
      result = *out;
      break;
    }
  }
  ASSERT_FALSE(result.empty()) << "the storm did not finish in 200 s";
  drain(3);
  auto count = nlohmann::json::parse(std::string(trim(result)), nullptr, false);
  ASSERT_TRUE(count.is_object()) << result;
  uint64_t oracle = count["text_poke"].get<uint64_t>();
  uint64_t arrived = log_.count("text_poke"), lost = log_.lost(KTP_LOST_PERF_RING);
  std::printf("[          ] 8 KiB rings: %lu pokes arrived, %lu records reported lost, guest oracle saw %lu\n",
              static_cast<unsigned long>(arrived), static_cast<unsigned long>(lost), static_cast<unsigned long>(oracle));
  // Losses at the very end of the storm are not written as PERF_RECORD_LOST
  // until the next record on that CPU; ktguest reads them with PERF_FORMAT_LOST.
  std::printf("[          ] losses read before the kernel wrote their record: %s\n",
              vm_->console_tail(400).find("not yet reported by the kernel") != std::string::npos ? "yes" : "none this run");
  EXPECT_GT(lost, 0u) << "8 KiB rings should overflow during the storm";
  const auto* hb = log_.last_heartbeat();
  ASSERT_NE(hb, nullptr);
  EXPECT_EQ(hb->lost_records, lost) << "the host was told of every lost record ktguest saw";
  // The oracle's own events flip static keys it cannot see (see above).
  EXPECT_LE(oracle, arrived + lost);
  EXPECT_GE(oracle + 64, arrived + lost);
  auto back = vm_->check("rm -f /run/ktguest.args; killall ktguest; sleep 3; ps | grep -v grep | grep -q ktguest");
  ASSERT_TRUE(back) << "ktguest with default rings did not come back: " << back.error().message << "\n--- console ---\n"
                     << vm_->console_tail(60);
}

}  // namespace
}  // namespace kt::test
