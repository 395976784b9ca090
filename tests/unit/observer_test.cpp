// The observer share: which stacks count as kthost's own guest side, on a
// hand-made symbol table and profile whose answer is worked out here.
#include <gtest/gtest.h>

#include "kthost/decode/observer.h"

namespace kt {
namespace {

// kallsyms text, as the guest prints it: two s_show functions, one of them
// kernel/kallsyms.c's (next to kallsyms_open), one far away (another file's).
const char* kKallsyms =
    "ffffffff81000000 T _stext\n"
    "ffffffff81001000 T entry_SYSCALL_64\n"
    "ffffffff81002000 T seq_read_iter\n"
    "ffffffff81003000 t s_show\n"
    "ffffffff81200000 t s_show\n"
    "ffffffff81201000 t update_iter\n"
    "ffffffff81202000 t kallsyms_open\n"
    "ffffffff81203000 t kallsyms_expand_symbol.constprop.0\n"
    "ffffffff81300000 T perf_event_text_poke\n"
    "ffffffff81301000 T text_poke_bp_batch\n"
    "ffffffff81302000 T perf_poll\n"
    "ffffffff81400000 T workload_func\n"
    "ffffffff81500000 T asm_sysvec_apic_timer_interrupt\n"
    "ffffffff81501000 T hrtimer_interrupt\n"
    "ffffffffc0001000 t port_fops_write\t[virtio_console]\n"
    "ffffffffc0002000 t ktg_guard\t[ktguard]\n"
    "ffffffffc0003000 t other_func\t[dummy]\n"
    "ffffffffc0002100 t ktg_wrap_prog_pack_free\t[ktguard]\n"
    "ffffffff81600000 T bpf_prog_pack_free\n"
    "ffffffff81601000 T mutex_spin_on_owner\n"
    "ffffffff81602000 T module_memfree\n";

class ObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(symbols_.add_kallsyms(kKallsyms, "").ok());
    symbols_.finalize();
  }
  uint32_t id(uint64_t addr) {
    uint32_t i = symbols_.lookup(addr, 0);
    EXPECT_NE(i, Symbolizer::kUnknown) << std::hex << addr;
    return i;
  }
  void stack(std::vector<uint64_t> addrs, uint64_t n) {
    std::vector<uint32_t> path;
    for (uint64_t a : addrs) path.push_back(id(a));
    profile_.stacks[path] += n;
    profile_.insns += n;
  }
  Symbolizer symbols_;
  Profile profile_;
};

TEST_F(ObserverTest, EachPartIsCountedOnceFromTheFirstMatchingFrame) {
  const uint64_t entry = 0xffffffff81001000, seq = 0xffffffff81002000, far_show = 0xffffffff81003000,
                 kallsyms_show = 0xffffffff81200000, update_iter = 0xffffffff81201000,
                 expand = 0xffffffff81203000, poke_out = 0xffffffff81300000, poke_batch = 0xffffffff81301000,
                 perf_poll = 0xffffffff81302000, work = 0xffffffff81400000, port = 0xffffffffc0001000,
                 guard = 0xffffffffc0002000, dummy = 0xffffffffc0003000;
  stack({entry, work}, 1000);                  // the workload
  stack({entry, seq, far_show}, 50);           // another file's s_show: the workload's
  stack({entry, work, expand}, 40);            // a lookup by name: the workload's
  stack({entry, seq, kallsyms_show}, 30);      // /proc/kallsyms formatting
  stack({entry, seq, update_iter, expand}, 7); // /proc/kallsyms iteration
  stack({entry, port}, 20);                    // ktguest's port write
  stack({entry, work, guard, port}, 5);        // a hold: ktguard is the first match
  stack({poke_batch, poke_out}, 3);            // the poke record for ktguest's ring
  stack({poke_batch}, 9);                      // the poke itself: the workload's
  stack({entry, perf_poll}, 2);
  stack({dummy}, 11);
  ObserverShare s = observer_share(profile_, symbols_);
  EXPECT_EQ(s.total, 1177u);
  EXPECT_EQ(s.parts.at("ktguard"), 5u);
  EXPECT_EQ(s.parts.at("ktguest channel"), 20u);
  EXPECT_EQ(s.parts.at("perf sideband"), 5u);
  EXPECT_EQ(s.parts.at("kallsyms reads"), 37u);
  EXPECT_EQ(s.insns, 67u);
  EXPECT_NEAR(s.percent(), 100.0 * 67 / 1177, 1e-9);
  std::string line = format_observer_line(s);
  EXPECT_NE(line.find("observer: 5.69% of instructions"), std::string::npos) << line;
  EXPECT_NE(line.find("kallsyms reads 3.14%"), std::string::npos) << line;
}

TEST_F(ObserverTest, AnInterruptOnTopOfAHoldIsNotTheObserversButTheChannelsOwnIsAboveItsEntry) {
  const uint64_t entry = 0xffffffff81001000, work = 0xffffffff81400000, guard = 0xffffffffc0002000,
                 port = 0xffffffffc0001000, irq = 0xffffffff81500000, timer = 0xffffffff81501000;
  stack({entry, work, guard}, 10);             // a hold spinning
  stack({entry, work, guard, irq, timer}, 4);  // a timer tick during it
  stack({entry, work, irq, port}, 3);          // the channel's interrupt work on the workload's stack
  ObserverShare s = observer_share(profile_, symbols_);
  EXPECT_EQ(s.parts.at("ktguard"), 10u);
  EXPECT_EQ(s.parts.at("ktguest channel"), 3u);
  EXPECT_EQ(s.insns, 13u);
}

// A hold's wrapper calls on to the function it hooked: that call's work (its
// wait for pack_mutex, seen at 1.02% of a main job) runs the same without
// kthost. The wrapper's own instructions and the hold beneath it are
// ktguard's; another kernel function beneath it is too.
TEST_F(ObserverTest, TheHookedOriginalUnderAGuardWrapperIsTheKernels) {
  const uint64_t entry = 0xffffffff81001000, wrap = 0xffffffffc0002100, guard = 0xffffffffc0002000,
                 pack_free = 0xffffffff81600000, spin = 0xffffffff81601000, memfree = 0xffffffff81602000,
                 port = 0xffffffffc0001000;
  stack({entry, pack_free, wrap}, 6);                   // the wrapper itself
  stack({entry, pack_free, wrap, guard}, 4);            // the hold
  stack({entry, pack_free, wrap, pack_free, spin}, 50);  // the original, waiting for its mutex
  stack({entry, pack_free, wrap, pack_free}, 20);        // the original's own work
  stack({entry, pack_free, wrap, memfree}, 8);           // not the hooked function: the wrapper's doing
  stack({entry, pack_free, wrap, pack_free, port}, 3);   // the channel is still the channel
  ObserverShare s = observer_share(profile_, symbols_);
  EXPECT_EQ(s.parts.at("ktguard"), 18u);
  EXPECT_EQ(s.parts.at("ktguest channel"), 3u);
  EXPECT_EQ(s.insns, 21u);
}

TEST_F(ObserverTest, WithoutKallsymsOpenNoSShowCounts) {
  Symbolizer bare;
  ASSERT_TRUE(bare.add_kallsyms("ffffffff81003000 t s_show\nffffffff81004000 T x\n", "").ok());
  bare.finalize();
  Profile p;
  p.stacks[{bare.lookup(0xffffffff81003000, 0)}] = 10;
  p.insns = 10;
  ObserverShare s = observer_share(p, bare);
  EXPECT_EQ(s.insns, 0u);
  EXPECT_EQ(s.parts.size(), 4u) << "every part is listed, zeros included";
}

TEST_F(ObserverTest, AnEmptyProfileIsZeroNotNaN) {
  ObserverShare s = observer_share(Profile{}, symbols_);
  EXPECT_EQ(s.percent(), 0.0);
}

}  // namespace
}  // namespace kt
