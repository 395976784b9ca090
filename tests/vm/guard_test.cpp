// ktguard against a real TCG guest: each free of executable text is noticed
// through /dev/ktguard before it happens, held until the ack, and a missing
// ack ends in a counted, recorded timeout. ktprobe guard-reader stands in for
// ktguest and the host: it copies the range from /proc/kcore, then acks.
#include <nlohmann/json.hpp>

#include "guest_checks.h"

namespace kt::test {
namespace {

constexpr const char* kParams = "/sys/module/ktguard/parameters";

class Guard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto vm = TestVm::start(VmOptions{.name = "guard", .tcg_threads = "single"});
    ASSERT_TRUE(vm) << vm.error().message;
    vm_ = std::move(*vm);
    if (!vm_->check("test -f /lib/kthost-test/ktguard.ko")) {
      missing_ = true;  // an image built with KTHOST_IMAGE_KTGUARD=OFF
      return;
    }
    // The image's init loads it at boot, before ktguest.
    auto loaded = vm_->check("test -d /sys/module/ktguard");
    ASSERT_TRUE(loaded) << "ktguard.ko is in the image but init did not load it: " << vm_->console_tail();
  }
  static void TearDownTestSuite() { vm_.reset(); }
  void SetUp() override {
    ASSERT_NE(vm_, nullptr) << "the guest did not boot";
    if (missing_) GTEST_SKIP() << "the image has no ktguard.ko (KTHOST_IMAGE_KTGUARD=OFF)";
  }

  // name=value counters from the stats parameter.
  static std::map<std::string, uint64_t> stats() {
    std::map<std::string, uint64_t> out;
    auto text = vm_->check(std::string("cat ") + kParams + "/stats");
    EXPECT_TRUE(text) << text.error().message;
    if (!text) return out;
    for (auto line : split(*text, '\n')) {
      auto eq = line.find('=');
      if (eq == std::string_view::npos) continue;
      out[std::string(line.substr(0, eq))] = parse_u64(line.substr(eq + 1)).value_or(0);
    }
    return out;
  }

  // Runs `workload` while a guard reader (with `reader_args`) is open;
  // returns the reader's notice lines.
  static std::vector<nlohmann::json> with_reader(const std::string& reader_args, const std::string& workload,
                                                 int seconds = 12) {
    std::string cmd = "ktprobe guard-reader --seconds " + std::to_string(seconds) + " " + reader_args +
                      " >/tmp/guard.out & sleep 1; " + workload + "; wait; cat /tmp/guard.out";
    auto out = vm_->check(cmd, std::chrono::seconds(seconds + 120));
    EXPECT_TRUE(out) << out.error().message;
    std::vector<nlohmann::json> notices;
    if (!out) return notices;
    for (auto line : split(*out, '\n')) {
      auto doc = nlohmann::json::parse(std::string(line), nullptr, false);
      if (doc.is_object() && doc.contains("id")) notices.push_back(doc);
    }
    return notices;
  }

  static uint64_t addr(const nlohmann::json& j, const char* key) {
    return parse_u64(j[key].get<std::string>()).value_or(0);
  }

  static inline std::unique_ptr<TestVm> vm_;
  static inline bool missing_ = false;
};

TEST_F(Guard, EveryHookAttachesWithFtrace) {
  auto hooks = vm_->check(std::string("cat ") + kParams + "/hooks");
  ASSERT_TRUE(hooks);
  for (const char* fn : {"bpf_prog_pack_free", "bpf_dispatcher_change_prog", "module_memfree", "__free_insn_slot"})
    EXPECT_NE(hooks->find(std::string(fn) + " ftrace"), std::string::npos) << *hooks;
}

TEST_F(Guard, FreedBpfImageIsHeldAndCopiedBeforeTheInt3Fill) {
  auto before = stats();
  auto notices = with_reader("--copy", "ktprobe bpf-load --insns 20 --name kt_guard >/tmp/load.json");
  auto loaded = vm_->check("cat /tmp/load.json");
  ASSERT_TRUE(loaded);
  auto prog = nlohmann::json::parse(std::string(trim(*loaded)));
  uint64_t jited = addr(prog, "jited_addr");
  bool found = false;
  for (const auto& n : notices) {
    if (n["kind"] != 1 || jited < addr(n, "start") || jited >= addr(n, "end")) continue;
    found = true;
    EXPECT_GT(n["not_int3"].get<uint64_t>(), 0u) << "copied after the free: " << n.dump();
    EXPECT_EQ(n["status"], 0) << n.dump();
  }
  EXPECT_TRUE(found) << "no kind-1 notice covers " << hex(jited);
  auto after = stats();
  EXPECT_GE(after["acks"], before["acks"] + 1);
  EXPECT_EQ(after["timeouts"], before["timeouts"]);
}

TEST_F(Guard, ModuleInitAndCoreTextAreHeld) {
  auto notices = with_reader("--copy",
                             "insmod /lib/kthost-test/dummy.ko && cat /sys/module/dummy/sections/.text >/tmp/text"
                             " && rmmod dummy");
  auto text = vm_->check("cat /tmp/text");
  ASSERT_TRUE(text);
  uint64_t core = parse_u64(trim(*text)).value_or(0);
  bool init = false, core_seen = false;
  for (const auto& n : notices) {
    if (n["kind"] == 6) init = true;
    if (n["kind"] == 5 && addr(n, "start") <= core && core < addr(n, "end")) core_seen = true;
  }
  EXPECT_TRUE(init) << "no module-init notice";
  EXPECT_TRUE(core_seen) << "no module-core notice covering " << hex(core);
}

// A trace instance's function tracer gets a dynamic ftrace_ops, whose
// trampoline is freed (arch_ftrace_trampoline_free -> module_memfree) when
// the tracer goes back to nop.
TEST_F(Guard, FtraceTrampolineIsHeld) {
  const std::string t = "/sys/kernel/tracing/instances/kt_guard";
  auto notices = with_reader("--copy", "mkdir " + t + " && echo do_sys_openat2 >" + t +
                                           "/set_ftrace_filter && echo function >" + t +
                                           "/current_tracer && sleep 1 && echo nop >" + t +
                                           "/current_tracer && rmdir " + t);
  bool found = false;
  for (const auto& n : notices) found |= n["kind"] == 7;
  EXPECT_TRUE(found) << "no ftrace-trampoline notice among " << notices.size();
}

// A kprobe past the fentry call is a breakpoint kprobe with an out-of-line
// instruction slot (and an optprobe slot once optimized): both are given
// back when the probe is removed.
TEST_F(Guard, KprobeInstructionSlotIsHeld) {
  const std::string ev = "/sys/kernel/tracing/kprobe_events";
  auto notices = with_reader("--copy", "echo 'p:kt_guard do_sys_openat2+5' >>" + ev + " && sleep 2 && echo '-:kt_guard' >>" + ev);
  bool found = false;
  for (const auto& n : notices) found |= n["kind"] == 8;
  EXPECT_TRUE(found) << "no kprobe-slot notice among " << notices.size();
}

TEST_F(Guard, MissingAckTimesOutAndIsRecordedWithTheAddress) {
  auto before = stats();
  auto notices = with_reader("--no-ack", "ktprobe bpf-load >/dev/null");
  const nlohmann::json* bpf = nullptr;
  for (const auto& n : notices)
    if (n["kind"] == 1) bpf = &n;
  ASSERT_NE(bpf, nullptr) << "no BPF image notice among " << notices.size();
  auto after = stats();
  EXPECT_GE(after["timeouts"], before["timeouts"] + 1);
  auto misses = vm_->check(std::string("cat ") + kParams + "/misses");
  ASSERT_TRUE(misses);
  EXPECT_NE(misses->find("timeout kind=1 start=" + hex(addr(*bpf, "start"))), std::string::npos) << *misses;
  // A hold never outlasts hold_ms by much.
  EXPECT_LT(after["hold_ns_max"], 1'000'000'000u);
}

TEST_F(Guard, NoReaderMeansNoHold) {
  auto before = stats();
  ASSERT_TRUE(vm_->check("ktprobe bpf-load >/dev/null && sleep 5"));
  auto after = stats();
  EXPECT_GE(after["unguarded"], before["unguarded"] + 1);
  EXPECT_EQ(after["notices"], before["notices"]);
}

// Attaching an XDP program rewrites the half of the XDP dispatcher image not
// in use; the old bytes there (the previous dispatcher) are held first.
TEST_F(Guard, DispatcherRewriteIsHeld) {
  auto notices = with_reader("--copy", "ip link set lo up && ktprobe xdp-cycle --rounds 3 >/dev/null", 10);
  int rewrites = 0;
  for (const auto& n : notices)
    if (n["kind"] == 2) {
      ++rewrites;
      EXPECT_EQ(addr(n, "end") - addr(n, "start"), 2048u) << n.dump();
    }
  EXPECT_GE(rewrites, 2) << "attach 2 and 3 rewrite a half that ran before";
}

// The atomic path: with every hook on a kprobe, holds busy-wait, and both
// the ack and the timeout still end them.
TEST_F(Guard, KprobeFallbackSpinsAndStillEnds) {
  ASSERT_TRUE(vm_->check("rmmod ktguard && insmod /lib/kthost-test/ktguard.ko force_kprobe=1"));
  auto hooks = vm_->check(std::string("cat ") + kParams + "/hooks");
  ASSERT_TRUE(hooks);
  EXPECT_NE(hooks->find("bpf_prog_pack_free kprobe"), std::string::npos) << *hooks;
  auto acked = with_reader("--copy", "ktprobe bpf-load >/dev/null");
  auto mid = stats();
  EXPECT_GE(mid["spins"], 1u);
  EXPECT_GE(mid["acks"], 1u);
  bool copied = false;
  for (const auto& n : acked) copied |= n["kind"] == 1 && n["not_int3"].get<uint64_t>() > 0;
  EXPECT_TRUE(copied) << "no BPF image copied before the free while spinning";
  with_reader("--no-ack", "ktprobe bpf-load >/dev/null");
  auto after = stats();
  EXPECT_GE(after["timeouts"], 1u);
  EXPECT_LT(after["hold_ns_max"], 1'000'000'000u);
  EXPECT_TRUE(vm_->check("rmmod ktguard && insmod /lib/kthost-test/ktguard.ko"));
}

}  // namespace
}  // namespace kt::test
