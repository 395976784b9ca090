// The unload race, end to end in a real TCG guest: ktguard (loaded at boot)
// -> ktguest -> virtio-serial -> `kthost trace` -> guest RAM -> text store.
//
// The oracle is the guest itself: ktprobe bpf-stress records every program's
// jited_prog_insns at load time, and the module loop reads the module's .text
// from /proc/kcore before each rmmod. The host's text store must hold exactly
// those bytes for every one, with no miss. Without the guard, the same kind
// of stress must show the race (saved bytes that differ), which proves the
// comparison can fail. kill -9 of kthost mid-stress must leave the guest
// running, with every hold ended within ktguard's timeout and the misses
// reported.
#include <signal.h>

#include <algorithm>
#include <map>
#include <optional>
#include <thread>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "guest_checks.h"
#include "kthost/common/io.h"
#include "kthost/textstore/text_store.h"
#include "kthost_shared.h"

namespace kt::test {
namespace {

constexpr const char* kStats = "/sys/module/ktguard/parameters/stats";
// socket, xdp, tracepoint, kprobe; KTHOST_BPF_PROGRAMS changes it (the
// kernel matrix, tests/vm/run-kernels.sh, runs fewer per kernel).
const int kBpfPrograms = [] {
  const char* env = std::getenv("KTHOST_BPF_PROGRAMS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : 1000;
}();
constexpr int kTrampolinePrograms = 40;  // fentry, fexit: each attach builds a BPF trampoline
constexpr int kModuleCycles = 50;

struct Prog {
  int index = 0;
  uint32_t id = 0;
  std::string kind;
  uint64_t addr = 0;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> unhex(std::string_view h) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoul(std::string(h.substr(i, 2)), nullptr, 16)));
  return out;
}

// "prog <index> <id> <kind> 0x<addr> <len> <hex>" (ktprobe bpf-stress --out)
std::vector<Prog> parse_progs(const std::string& text) {
  std::vector<Prog> out;
  for (auto line : split(text, '\n')) {
    auto f = split(line, ' ');
    if (f.size() != 7 || f[0] != "prog") continue;
    Prog p;
    p.index = static_cast<int>(parse_u64(f[1]).value_or(0));
    p.id = static_cast<uint32_t>(parse_u64(f[2]).value_or(0));
    p.kind = std::string(f[3]);
    p.addr = parse_u64(f[4]).value_or(0);
    p.bytes = unhex(f[6]);
    EXPECT_EQ(p.bytes.size(), parse_u64(f[5]).value_or(0)) << line;
    out.push_back(std::move(p));
  }
  return out;
}

// "mod <i> 0x<text addr> <len> <hex>" (the module loop below)
struct ModCycle {
  uint64_t addr = 0;
  std::vector<uint8_t> bytes;
};
std::vector<ModCycle> parse_mods(const std::string& text) {
  std::vector<ModCycle> out;
  for (auto line : split(text, '\n')) {
    auto f = split(line, ' ');
    if (f.size() != 5 || f[0] != "mod") continue;
    out.push_back(ModCycle{parse_u64(f[2]).value_or(0), unhex(f[4])});
    EXPECT_EQ(out.back().bytes.size(), parse_u64(f[3]).value_or(0)) << line;
  }
  return out;
}

std::string module_loop(int cycles) {
  return "len=$(ktprobe elf-section-size /lib/kthost-test/dummy.ko .text) && i=0 && while [ $i -lt " +
         std::to_string(cycles) +
         " ]; do insmod /lib/kthost-test/dummy.ko || exit 1; a=$(cat /sys/module/dummy/sections/.text); "
         "h=$(ktprobe kcore-read $a $len | sed 's/.*\"hex\":\"\\([0-9a-f]*\\)\".*/\\1/'); "
         "echo \"mod $i $a $len $h\"; rmmod dummy || exit 1; i=$((i+1)); done >/tmp/mod.txt";
}

// Where `bytes` (at `addr`) sit in a saved record, or nullopt.
bool record_holds(const TextRecord& r, uint64_t addr, const std::vector<uint8_t>& bytes) {
  if (addr < r.start || addr - r.start + bytes.size() > r.bytes.size()) return false;
  return std::equal(bytes.begin(), bytes.end(), r.bytes.begin() + static_cast<ptrdiff_t>(addr - r.start));
}
bool record_covers(const TextRecord& r, uint64_t addr, size_t len) {
  return addr >= r.start && addr - r.start + len <= r.bytes.size();
}

class UnloadRace : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto vm = TestVm::start(VmOptions{.name = "unloadrace", .mem = "1G"});
    ASSERT_TRUE(vm) << vm.error().message;
    vm_ = std::move(*vm);
  }
  static void TearDownTestSuite() { vm_.reset(); }
  void SetUp() override {
    ASSERT_NE(vm_, nullptr) << "the guest did not boot";
    // An image built without ktguard skips (visibly); one that has the
    // module but did not load it fails.
    if (!vm_->check("test -f /lib/kthost-test/ktguard.ko"))
      GTEST_SKIP() << "the image has no ktguard.ko (KTHOST_IMAGE_KTGUARD=OFF)";
    ASSERT_TRUE(vm_->check("test -d /sys/module/ktguard"))
        << "ktguard.ko is in the image but is not loaded: " << vm_->console_tail();
  }

  static std::map<std::string, uint64_t> guard_stats() {
    std::map<std::string, uint64_t> out;
    auto text = vm_->check(std::string("cat ") + kStats);
    EXPECT_TRUE(text) << text.error().message;
    if (!text) return out;
    for (auto line : split(*text, '\n')) {
      auto eq = line.find('=');
      if (eq != std::string_view::npos) out[std::string(line.substr(0, eq))] = parse_u64(line.substr(eq + 1)).value_or(0);
    }
    return out;
  }
  static uint64_t misses(std::map<std::string, uint64_t>& s) {
    return s["timeouts"] + s["reader_gone"] + s["overflows"] + s["host_errors"];
  }

  // Starts `kthost trace` and waits until ktguest has the guard open (or,
  // with --no-guard, until the session is up).
  // Starts kthost trace and waits until ktguest reports `ready` (by default:
  // its guard open when `guard`, else connected).
  static std::unique_ptr<Background> start_trace(const std::string& dir, bool guard, std::string ready = "") {
    vm_->release_channels();
    std::vector<std::string> argv = {kthost_binary(), "trace", "--vm", vm_->vm_json(), "-o", dir, "--pt", "none"};
    if (!guard) argv.push_back("--no-guard");
    auto bg = Background::start(argv, dir + ".log");
    EXPECT_TRUE(bg) << bg.error().message;
    if (!bg) return nullptr;
    std::string want = !ready.empty() ? ready : guard ? "\"guard_open\":1" : "\"connected\":1";
    for (int i = 0; i < 120; ++i) {
      auto st = vm_->check("cat /run/ktguest.stats");
      if (st && st->find(want) != std::string::npos) return std::move(*bg);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    ADD_FAILURE() << "ktguest never reported " << want << "; kthost trace said: " << (*bg)->log();
    return nullptr;
  }

  // BPF frees run later, from a work item after an RCU grace period: wait
  // until ktguard's counters stop moving.
  static void wait_quiet() {
    std::string last;
    int same = 0;
    for (int i = 0; i < 60 && same < 3; ++i) {
      auto s = vm_->check(std::string("cat ") + kStats);
      if (s && *s == last) ++same;
      else same = 0;
      if (s) last = *s;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }

  static nlohmann::json stop_trace(Background& bg, const std::string& dir) {
    bg.signal(SIGTERM);
    int status = bg.wait(std::chrono::seconds(60));
    EXPECT_EQ(status, 0) << bg.log();
    auto text = read_file(dir + "/summary.json");
    EXPECT_TRUE(text) << bg.log();
    return text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  }

  // The holds kthost could not save, by reason and kind, with the first of
  // each (holds.jsonl), so a failure says why.
  static std::string failed_holds(const std::string& dir) {
    auto text = read_file(dir + "/holds.jsonl");
    if (!text) return "holds.jsonl: " + text.error().message;
    std::map<std::string, std::pair<int, std::string>> why;
    size_t pos = 0;
    while (pos < text->size()) {
      size_t nl = text->find('\n', pos);
      if (nl == std::string::npos) nl = text->size();
      auto j = nlohmann::json::parse(text->substr(pos, nl - pos), nullptr, false);
      pos = nl + 1;
      if (!j.is_object() || !j.contains("error")) continue;
      std::string key = "kind " + std::to_string(j.value("kind", 0)) + ": " + j.value("error", "");
      auto& [count, first] = why[key];
      if (count++ == 0) first = j.dump();
    }
    std::string out = "failed holds (holds.jsonl):";
    for (const auto& [key, v] : why) out += "\n  " + std::to_string(v.first) + " x " + key + "\n    first: " + v.second;
    return out;
  }

  static std::string guest_file(const std::string& path) {
    auto out = vm_->exec("cat " + path, std::chrono::seconds(120));
    EXPECT_TRUE(out && out->status == 0 && !out->truncated) << path;
    return out ? out->output : "";
  }

  static inline std::unique_ptr<TestVm> vm_;
};

TEST_F(UnloadRace, GuardSavesEveryUnloadedTextExactly) {
  std::string dir = vm_->state_dir() + "/trace-guard";
  auto before = guard_stats();
  ASSERT_TRUE(vm_->check("echo reset > /sys/module/ktguard/parameters/hold_hist"));
  auto trace = start_trace(dir, true);
  ASSERT_NE(trace, nullptr);

  auto bpf = vm_->check("ktprobe bpf-stress --count " + std::to_string(kBpfPrograms) +
                            " --kinds socket,xdp,tracepoint,kprobe --out /tmp/bpf1.txt",
                        std::chrono::seconds(600));
  ASSERT_TRUE(bpf) << bpf.error().message;
  auto tramp = vm_->check("ktprobe bpf-stress --count " + std::to_string(kTrampolinePrograms) +
                              " --kinds fentry,fexit --seed 2 --out /tmp/bpf2.txt",
                          std::chrono::seconds(600));
  ASSERT_TRUE(tramp) << tramp.error().message;
  auto mods = vm_->check(module_loop(kModuleCycles), std::chrono::seconds(600));
  ASSERT_TRUE(mods) << mods.error().message;
  wait_quiet();
  auto after = guard_stats();
  auto hist = vm_->check("cat /sys/module/ktguard/parameters/hold_hist");
  auto summary = stop_trace(*trace, dir);
  std::printf("bpf-stress: %s\ntrampolines: %s\nkthost trace: %s\n", std::string(trim(*bpf)).c_str(),
              std::string(trim(*tramp)).c_str(), summary.dump().c_str());

  // No miss: every hold ended with the host's ack.
  EXPECT_EQ(misses(after), misses(before)) << "ktguard missed holds: " << vm_->check("cat /sys/module/ktguard/parameters/misses")->c_str();
  EXPECT_EQ(after["unguarded"], before["unguarded"]) << "frees went unguarded while kthost was attached";
  EXPECT_GT(after["acks"], before["acks"] + kBpfPrograms);
  EXPECT_EQ(summary.value("holds_failed", 1), 0) << failed_holds(dir);
  EXPECT_EQ(summary.value("lost_guard_miss", 1), 0);
  EXPECT_EQ(summary.value("holds", 0), after["notices"] - before["notices"]);
  // kthost stored every saved hold's ack word (the memfd backing is
  // writable), and ktguard ended holds on those words; the rest ended on the
  // channel ack. A hold the word ended was either read by ktguest, and then
  // its channel ack came late, or found by kthost in ktguard's mirror and
  // ended before ktguest read it ("unread": no channel round trip at all).
  EXPECT_EQ(summary.value("holds_word_acked", 0), summary.value("holds", 1));
  EXPECT_EQ(summary.value("holds_word_ack_failed", 1), 0);
  EXPECT_GT(after["word_acks"], before["word_acks"]);
  EXPECT_EQ(after["stale_acks"], before["stale_acks"]) << "acks for ids ktguard never issued";
  EXPECT_LE(after["word_acks"] - before["word_acks"], after["acks"] - before["acks"]);
  EXPECT_GE(after["late_acks"] - before["late_acks"] + after["unread"] - before["unread"],
            after["word_acks"] - before["word_acks"])
      << "a hold the word ended neither got its channel ack late nor ended unread";
  EXPECT_LE(after["unread"] - before["unread"], static_cast<uint64_t>(summary.value("holds_polled", 0)))
      << "holds ended unread that kthost did not find in the mirror";
  std::printf("holds ended by the ack word: %lu of %lu (late channel acks %lu, ended before ktguest read them %lu; "
              "found in the mirror %d)\n",
              static_cast<unsigned long>(after["word_acks"] - before["word_acks"]),
              static_cast<unsigned long>(after["acks"] - before["acks"]),
              static_cast<unsigned long>(after["late_acks"] - before["late_acks"]),
              static_cast<unsigned long>(after["unread"] - before["unread"]), summary.value("holds_polled", 0));

  auto store = read_text_store(dir + "/text.kts");
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ(store->ignored_tail, 0u);
  std::vector<const TextRecord*> guard;
  for (const auto& r : store->records)
    if (r.source == TextSource::Guard) guard.push_back(&r);
  std::sort(guard.begin(), guard.end(), [](auto* a, auto* b) { return a->id < b->id; });

  // Every program: its own free is the first BPF image notice covering its
  // bytes after its load (its space is reused only after that free). The
  // load time is the ksymbol register event's, from the host's load copy,
  // found by the program's unique name.
  auto progs = parse_progs(guest_file("/tmp/bpf1.txt"));
  auto progs2 = parse_progs(guest_file("/tmp/bpf2.txt"));
  ASSERT_EQ(progs.size(), static_cast<size_t>(kBpfPrograms));
  ASSERT_EQ(progs2.size(), static_cast<size_t>(kTrampolinePrograms));
  progs.insert(progs.end(), progs2.begin(), progs2.end());
  std::map<std::pair<uint64_t, std::string>, std::vector<uint64_t>> load_time;  // (addr, "kts_kind_index")
  for (const auto& r : store->records) {
    auto at = r.name.find("_kts_");
    if (r.source == TextSource::Load && r.kind == KTHOST_TEXT_KSYMBOL_BPF && at != std::string::npos)
      load_time[{r.start, r.name.substr(at + 1)}].push_back(r.time);
  }
  auto prog_load_time = [&](const Prog& p) -> std::optional<uint64_t> {
    for (const auto& [key, times] : load_time) {
      if (key.first != p.addr) continue;
      const std::string& name = key.second;  // kts_<kind, maybe cut>_<index>
      auto us = name.rfind('_');
      std::string kind = name.substr(4, us - 4), index = name.substr(us + 1);
      if (index == std::to_string(p.index) && p.kind.compare(0, kind.size(), kind) == 0 && times.size() == 1)
        return times[0];
    }
    return std::nullopt;
  };
  std::map<std::string, int> kinds;
  int matched = 0, wrong = 0, unsaved = 0;
  for (const auto& p : progs) {
    auto loaded = prog_load_time(p);
    const TextRecord* rec = nullptr;
    for (auto* r : guard)
      if (r->kind == 1 && loaded && r->time > *loaded && record_covers(*r, p.addr, p.bytes.size()) &&
          (!rec || r->time < rec->time))
        rec = r;
    if (!rec) {
      ++unsaved;
      ADD_FAILURE() << "program " << p.index << " (" << p.kind << ", id " << p.id << ", " << hex(p.addr)
                    << "): " << (loaded ? "no guard copy after its load" : "no load record with its name");
    } else if (!record_holds(*rec, p.addr, p.bytes)) {
      ++wrong;
      size_t off = p.addr - rec->start, at = 0;
      while (at < p.bytes.size() && rec->bytes[off + at] == p.bytes[at]) ++at;
      ADD_FAILURE() << "program " << p.index << " (" << p.kind << ", " << p.bytes.size() << " bytes) at "
                    << hex(p.addr) << ": saved bytes (notice " << rec->id << ", [" << hex(rec->start) << ", +"
                    << rec->bytes.size() << ")) differ from jited_prog_insns at offset " << at << ": saved "
                    << hex_bytes(rec->bytes.data() + off + at, std::min<size_t>(16, p.bytes.size() - at))
                    << " guest " << hex_bytes(p.bytes.data() + at, std::min<size_t>(16, p.bytes.size() - at));
    } else {
      ++matched;
      kinds[p.kind]++;
    }
    if (unsaved + wrong > 10) break;
  }
  EXPECT_EQ(matched, kBpfPrograms + kTrampolinePrograms);
  for (const char* kind : {"socket", "xdp", "tracepoint", "kprobe", "fentry", "fexit"})
    EXPECT_GT(kinds[kind], 0) << kind;
  size_t trampolines = std::count_if(guard.begin(), guard.end(), [](auto* r) { return r->kind == 4; });
  EXPECT_GE(trampolines, 1u) << "no BPF trampoline image was saved";

  // Every module cycle: the k-th core-text notice holds what /proc/kcore showed.
  auto cycles = parse_mods(guest_file("/tmp/mod.txt"));
  ASSERT_EQ(cycles.size(), static_cast<size_t>(kModuleCycles));
  std::vector<const TextRecord*> core;
  for (auto* r : guard)
    if (r->kind == 5) core.push_back(r);
  ASSERT_GE(core.size(), cycles.size());
  size_t at = 0;
  int mod_ok = 0;
  for (size_t i = 0; i < cycles.size(); ++i) {
    while (at < core.size() && !record_covers(*core[at], cycles[i].addr, cycles[i].bytes.size())) ++at;
    ASSERT_LT(at, core.size()) << "module cycle " << i << " at " << hex(cycles[i].addr) << ": no core-text copy";
    EXPECT_TRUE(record_holds(*core[at], cycles[i].addr, cycles[i].bytes)) << "module cycle " << i;
    mod_ok += record_holds(*core[at], cycles[i].addr, cycles[i].bytes);
    ++at;
  }
  EXPECT_EQ(mod_ok, kModuleCycles);
  size_t init_text = std::count_if(guard.begin(), guard.end(), [](auto* r) { return r->kind == 6; });
  std::printf("saved: %d/%d BPF images (%zu trampoline images), %d/%d module texts (%zu init texts); "
              "%zu guard records\nhold durations (us, count):\n%s\n",
              matched, kBpfPrograms + kTrampolinePrograms, trampolines, mod_ok, kModuleCycles, init_text,
              guard.size(), hist ? hist->c_str() : "?");
}

TEST_F(UnloadRace, WithoutTheGuardTheRaceShows) {
  // Best effort: ktguard is unloaded; the host copies on unregister events.
  ASSERT_TRUE(vm_->check("rmmod ktguard"));
  std::string dir = vm_->state_dir() + "/trace-noguard";
  auto trace = start_trace(dir, false);
  ASSERT_NE(trace, nullptr);
  // The same BPF stress as the guarded run, so the two are comparable.
  auto bpf = vm_->check("ktprobe bpf-stress --count " + std::to_string(kBpfPrograms) +
                            " --kinds socket,xdp,tracepoint,kprobe --out /tmp/bpf3.txt",
                        std::chrono::seconds(600));
  EXPECT_TRUE(bpf) << bpf.error().message;
  std::this_thread::sleep_for(std::chrono::seconds(5));
  auto summary = stop_trace(*trace, dir);
  EXPECT_TRUE(vm_->check("insmod /lib/kthost-test/ktguard.ko"));
  std::printf("kthost trace --no-guard: %s\n", summary.dump().c_str());

  auto store = read_text_store(dir + "/text.kts");
  ASSERT_TRUE(store) << store.error().message;
  auto progs = parse_progs(guest_file("/tmp/bpf3.txt"));
  ASSERT_EQ(progs.size(), static_cast<size_t>(kBpfPrograms));
  // The unregister copy of each program, by its unique name.
  std::map<std::string, const TextRecord*> unreg;
  for (const auto& r : store->records)
    if (r.source == TextSource::Unregister) unreg[r.name] = &r;
  int same = 0, differ = 0, int3 = 0, none = 0;
  for (const auto& p : progs) {
    const TextRecord* rec = nullptr;
    // The kernel cuts names to 16 characters, so the kind is cut by as much
    // as the index is long ("kts_tracepoi_18", "kts_tracepo_102"): match the
    // index and the address.
    std::string suffix = "_" + std::to_string(p.index);
    for (const auto& [name, r] : unreg)
      if (name.find("_kts_") != std::string::npos && name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 && r->start == p.addr)
        rec = r;
    if (!rec) {
      ++none;
      continue;
    }
    if (record_holds(*rec, p.addr, p.bytes)) ++same;
    else {
      ++differ;
      if (std::count(rec->bytes.begin(), rec->bytes.end(), 0xCC) > static_cast<long>(rec->bytes.size() / 2)) ++int3;
    }
  }
  std::printf("best effort: %d programs saved intact, %d differ (%d mostly int3), %d without an unregister copy\n",
              same, differ, int3, none);
  // Copies were taken, and some of them hold what the guest wrote over freed
  // text (int3 fill): bytes that really differ, not just missing copies.
  EXPECT_GE(same + differ, static_cast<int>(progs.size()) / 2) << "most unloads got no unregister copy at all";
  EXPECT_GE(int3, 1) << "the race did not show: no unregister copy holds the int3 fill of freed text";
  EXPECT_GE(summary.value("unloads_lost", 0), 1) << "kthost did not count any unload as lost";
  // Every best-effort unload is counted: lost (int3, unreadable, changed) or
  // unverified (even the copies that happen to be intact prove nothing).
  EXPECT_GE(summary.value("unloads_lost", 0) + summary.value("unloads_unverified", 0), static_cast<int>(progs.size()))
      << "best-effort unloads left uncounted";
}

// A guest without ktguard (not loaded, or built for another kernel): kthost
// trace asks for the guard, ktguest answers GUARD_STATE absent with the
// reason, and the host falls back to best effort by itself: unregister
// copies, losses counted, and both the notice and the summary say why.
TEST_F(UnloadRace, AGuestWithoutKtguardFallsBackToBestEffortAndSaysWhy) {
  ASSERT_TRUE(vm_->check("rmmod ktguard"));
  std::string dir = vm_->state_dir() + "/trace-absent";
  auto trace = start_trace(dir, true, "\"connected\":1");
  ASSERT_NE(trace, nullptr);
  auto bpf = vm_->check("ktprobe bpf-stress --count 100 --kinds socket,xdp --out /tmp/bpf4.txt",
                        std::chrono::seconds(300));
  EXPECT_TRUE(bpf) << bpf.error().message;
  std::this_thread::sleep_for(std::chrono::seconds(5));
  auto summary = stop_trace(*trace, dir);
  const std::string log = trace->log();
  EXPECT_TRUE(vm_->check("insmod /lib/kthost-test/ktguard.ko"));
  std::printf("kthost trace, guest without ktguard: %s\n", summary.dump().c_str());
  EXPECT_TRUE(summary.value("guard", false));
  EXPECT_EQ(summary.value("guest_guard", "").rfind("absent: open /dev/ktguard", 0), 0u) << summary.dump();
  EXPECT_EQ(summary.value("holds", 1), 0);
  EXPECT_GE(summary.value("unloads_seen", 0), 100);
  EXPECT_GE(summary.value("unregister_copies", 0), 1) << "no best-effort copy was taken";
  EXPECT_NE(log.find("the guest's guard is absent"), std::string::npos) << log;
  EXPECT_NE(log.find("guest guard absent"), std::string::npos) << "the one-line summary does not say it: " << log;
}

// A kernel where ktguard cannot hook one freeing path (here bpf_prog_pack_free,
// left unhooked with skip_hooks as on a kernel without that function): the
// guard is on for everything else, ktguest names the path in GUARD_HOOKS, and
// the host copies BPF unloads best effort. Every program is then either saved
// intact by that copy or counted as lost: none is lost silently.
TEST_F(UnloadRace, APathKtguardCannotHookIsCopiedBestEffortAndCounted) {
  ASSERT_TRUE(vm_->check("rmmod ktguard && insmod /lib/kthost-test/ktguard.ko skip_hooks=bpf_prog_pack_free"));
  auto hooks = vm_->check("cat /sys/module/ktguard/parameters/hooks");
  ASSERT_TRUE(hooks);
  EXPECT_NE(hooks->find("bpf_prog_pack_free none"), std::string::npos) << *hooks;
  std::string dir = vm_->state_dir() + "/trace-unhooked";
  auto trace = start_trace(dir, true);
  ASSERT_NE(trace, nullptr);
  constexpr int kPrograms = 100;
  auto bpf = vm_->check("ktprobe bpf-stress --count " + std::to_string(kPrograms) +
                            " --kinds socket,xdp --out /tmp/bpf5.txt",
                        std::chrono::seconds(300));
  EXPECT_TRUE(bpf) << bpf.error().message;
  wait_quiet();
  auto summary = stop_trace(*trace, dir);
  const std::string log = trace->log();
  EXPECT_TRUE(vm_->check("rmmod ktguard && insmod /lib/kthost-test/ktguard.ko"));
  std::printf("kthost trace, bpf_prog_pack_free unhooked: %s\n", summary.dump().c_str());
  EXPECT_EQ(summary.value("guest_guard", ""), "on");
  ASSERT_TRUE(summary.contains("guard_unheld") && summary["guard_unheld"].size() == 1) << summary.dump();
  EXPECT_EQ(summary["guard_unheld"][0].get<std::string>().rfind("bpf_prog_pack_free (", 0), 0u) << summary.dump();
  EXPECT_NE(log.find("the guest's guard does not hold bpf_prog_pack_free"), std::string::npos) << log;
  EXPECT_NE(log.find("unheld by the guest's guard"), std::string::npos) << "the one-line summary does not say it: " << log;
  EXPECT_GE(summary.value("unloads_seen", 0), kPrograms);

  auto store = read_text_store(dir + "/text.kts");
  ASSERT_TRUE(store) << store.error().message;
  auto progs = parse_progs(guest_file("/tmp/bpf5.txt"));
  ASSERT_EQ(progs.size(), static_cast<size_t>(kPrograms));
  int intact = 0;
  for (const auto& p : progs) {
    std::string suffix = "_" + std::to_string(p.index);
    for (const auto& r : store->records)
      if (r.source == TextSource::Unregister && r.start == p.addr && r.name.find("_kts_") != std::string::npos &&
          r.name.size() >= suffix.size() && r.name.compare(r.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
          record_holds(r, p.addr, p.bytes)) {
        ++intact;
        break;
      }
  }
  const int lost = summary.value("unloads_lost", 0), unverified = summary.value("unloads_unverified", 0);
  std::printf("unheld BPF path: %d of %d programs' unregister copies hold their JIT bytes; %d unloads counted lost, "
              "%d copied unverified\n",
              intact, kPrograms, lost, unverified);
  // The fallback ran: each unload was copied (none is without the fallback,
  // as the guard is on) ...
  EXPECT_GE(summary.value("unregister_copies", 0), kPrograms) << "the unheld path's unloads were not copied";
  // ... and none of them is vouched for: a copy taken after the unload event
  // cannot prove it predates the free (most hold int3 or the next program).
  EXPECT_GE(lost + unverified, kPrograms) << "unloads neither counted as lost nor as unverified";
  EXPECT_GE(summary.value("lost_total", 0), lost + unverified);
}

TEST_F(UnloadRace, KillingKthostNeverHangsTheGuest) {
  std::string dir = vm_->state_dir() + "/trace-kill";
  auto before = guard_stats();
  auto trace = start_trace(dir, true);
  ASSERT_NE(trace, nullptr);
  // A stress in the background; kthost first hangs (SIGSTOP: holds time out),
  // then dies (SIGKILL: the guard closes).
  ASSERT_TRUE(vm_->check("(" + module_loop(40) + "; ktprobe bpf-stress --count 300 --kinds socket,xdp --batch 4 "
                         "--out /tmp/bpf4.txt >/tmp/bpf4.json 2>&1; echo done >/tmp/stress.done) "
                         "</dev/null >/dev/null 2>&1 &"));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  trace->signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  trace->signal(SIGKILL);
  EXPECT_EQ(trace->wait(std::chrono::seconds(10)), 128 + SIGKILL);
  bool done = false;
  for (int i = 0; i < 240 && !done; ++i) {
    done = static_cast<bool>(vm_->check("test -f /tmp/stress.done"));
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_TRUE(done) << "the guest's stress did not finish after kthost was killed";
  EXPECT_TRUE(vm_->check("grep -q '\"failed\":0' /tmp/bpf4.json")) << guest_file("/tmp/bpf4.json");
  wait_quiet();
  auto after = guard_stats();
  auto status = vm_->qmp().execute("query-status");
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_EQ((*status)["status"], "running");
  vm_->close_qmp();

  uint64_t missed = misses(after) - misses(before), timeouts = after["timeouts"] - before["timeouts"];
  auto listed = vm_->check("cat /sys/module/ktguard/parameters/misses");
  std::printf("after kill -9: %lu misses (%lu timeouts, %lu reader gone), %lu unguarded, longest hold %.1f ms\n%s",
              static_cast<unsigned long>(missed), static_cast<unsigned long>(timeouts),
              static_cast<unsigned long>(after["reader_gone"] - before["reader_gone"]),
              static_cast<unsigned long>(after["unguarded"] - before["unguarded"]), static_cast<double>(after["hold_ns_max"]) / 1e6,
              listed ? listed->c_str() : "");
  EXPECT_GE(timeouts, 1u) << "the stopped host should have let at least one hold time out";
  EXPECT_NE(listed->find("timeout kind="), std::string::npos) << *listed;
  EXPECT_NE(listed->find("start=0x"), std::string::npos) << *listed;
  // Every hold ended by ktguard's timeout (200 ms) at the latest.
  EXPECT_LT(after["hold_ns_max"], 250'000'000u);

  // The guest reports its misses to the next host.
  vm_->release_channels();
  auto events = run_command(kthost_binary() + " events --vm " + vm_->vm_json() + " --duration 6 --json --quiet", 60);
  ASSERT_EQ(events.status, 0) << events.output;
  auto lines = split(trim(events.output), '\n');
  auto doc = nlohmann::json::parse(std::string(lines.empty() ? "" : lines.back()), nullptr, false);
  ASSERT_TRUE(doc.is_object()) << events.output;
  EXPECT_GE(doc.value("guard_missed_since_load", 0u), missed) << events.output;
}

}  // namespace
}  // namespace kt::test
