// The plugin's call-stack truth (pt-plugin/truth_stacks.h): hand-made block
// sequences and stack slots, as the plugin's callbacks would report them.
#include "truth_stacks.h"

#include "plugin_blocks.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using ktpt::Block;
using ktpt::EndKind;
using ktpt::TruthStacks;

constexpr uint64_t kTaskA = 0xffffc90000104000ull;  // a 16 KiB task stack region's top part
constexpr uint64_t kTaskB = 0xffffc90000208000ull;
constexpr uint64_t kIrq = 0xffffc90000010000ull;

using ktpt::testing::kblock;

// The return addresses from the bottom of the truth's current stack to its
// top; an interrupt frame shows as "i:" and where it struck.
std::vector<std::string> stack_of(const TruthStacks& t) {
  std::vector<std::string> out;
  for (uint32_t n = t.top(); n > TruthStacks::kBaseUnknown; n = t.node(n).parent) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%s%llx", t.node(n).interrupt ? "i:" : "", static_cast<unsigned long long>(t.node(n).ret));
    out.insert(out.begin(), buf);
  }
  uint32_t base = t.top();
  while (base > TruthStacks::kBaseUnknown) base = t.node(base).parent;
  if (base == TruthStacks::kBaseUnknown) out.insert(out.begin(), "?");
  return out;
}

using S = std::vector<std::string>;

// The plugin's short way for REP iterations (is_rep_repeat, take_rep_repeat)
// counts nothing more and leaves the next block where on_kernel_block would.
TEST(TruthStacks, RepIterationsTakenTheShortWayCountTheRepOnce) {
  Block first = kblock(0x1000, 2, EndKind::Rep);  // the REP at 0x1002
  Block again = kblock(0x1002, 1, EndKind::Rep);
  Block after = kblock(0x1004, 1, EndKind::DirectCall, 0x3000);
  Block callee = kblock(0x3000, 1, EndKind::Return);
  TruthStacks t;
  t.on_user();
  EXPECT_FALSE(t.is_rep_repeat(again)) << "after user code";
  t.on_kernel_block(first, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(t.is_rep_repeat(again));
    t.take_rep_repeat(again);
  }
  EXPECT_FALSE(t.is_rep_repeat(after));
  t.on_kernel_block(after, 3);
  t.on_call(kTaskA + 0xf00, after.next);
  t.on_kernel_block(callee, 4);
  EXPECT_EQ(t.count(TruthStacks::kEmpty, 1), 1u);
  EXPECT_EQ(t.count(TruthStacks::kEmpty, 2), 0u) << "iterations are not counted";
  EXPECT_EQ(t.count(TruthStacks::kEmpty, 3), 1u);
  EXPECT_EQ(stack_of(t), (S{"1006"}));
  EXPECT_EQ(t.transitions(after.last, 0x3000, TruthStacks::Transition::Call), 1u);
}

TEST(TruthStacks, ACallPushesItsReturnAddressAndTheReturnAtTheSameSlotPops) {
  TruthStacks t;
  Block entry = kblock(0x1000, 3, EndKind::DirectCall, 0x2000);
  Block callee = kblock(0x2000, 2, EndKind::Return);
  Block after = kblock(0x1006, 2, EndKind::Fallthrough);
  t.on_user();
  t.on_kernel_block(entry, 1);
  t.on_call(kTaskA + 0xf00, entry.next);
  t.on_kernel_block(callee, 2);
  EXPECT_EQ(stack_of(t), (S{"1006"}));
  EXPECT_EQ(t.count(t.top(), 2), 1u);
  t.on_return(kTaskA + 0xf00);
  t.on_kernel_block(after, 3);
  EXPECT_EQ(stack_of(t), S{});  // entered from user space: the empty stack, known
  EXPECT_EQ(t.top(), TruthStacks::kEmpty);
  EXPECT_EQ(t.count(TruthStacks::kEmpty, 1), 1u);
  EXPECT_EQ(t.transitions(entry.last, 0x2000, TruthStacks::Transition::Call), 1u);
  EXPECT_EQ(t.transitions(callee.last, 0x1006, TruthStacks::Transition::Return), 1u);
}

TEST(TruthStacks, ARetpolinesInnerCallAndReturnLeaveTheThunkCallsFrame) {
  TruthStacks t;
  Block caller = kblock(0x1000, 2, EndKind::DirectCall, 0x5000);
  Block thunk = kblock(0x5000, 1, EndKind::DirectCall, 0x5010);
  Block rop = kblock(0x5010, 2, EndKind::Return);
  Block target = kblock(0x3000, 2, EndKind::Fallthrough);
  t.on_user();
  t.on_kernel_block(caller, 1);
  t.on_call(kTaskA + 0x800, caller.next);
  t.on_kernel_block(thunk, 2);
  t.on_call(kTaskA + 0x7f8, thunk.next);
  t.on_kernel_block(rop, 3);
  t.on_return(kTaskA + 0x7f8);  // mov %rax,(%rsp); ret
  t.on_kernel_block(target, 4);
  EXPECT_EQ(stack_of(t), (S{"1004"}));
}

TEST(TruthStacks, AReturnBelowItsCallSlotPopsTheTopFrame) {
  // error_entry pushes the registers under its return address and returns from there.
  TruthStacks t;
  t.on_user();
  Block a = kblock(0x1000, 2, EndKind::DirectCall, 0x2000), e = kblock(0x2000, 4, EndKind::Return);
  Block b = kblock(0x1004, 2, EndKind::Fallthrough);
  t.on_kernel_block(a, 1);
  t.on_call(kTaskA + 0xf00, a.next);
  t.on_kernel_block(e, 2);
  t.on_return(kTaskA + 0xf00 - 15 * 8);
  t.on_kernel_block(b, 3);
  EXPECT_EQ(stack_of(t), S{});
}

TEST(TruthStacks, AReturnBelowTheTopFrameThatGoesElsewhereIsAnUnseenCallsAndKeepsTheFrame) {
  // An INT3 handler emulates a call at 0x2004 (text_poke_bp): it pushes
  // 0x2009 itself, and the callee's return loads it from below F's slot.
  TruthStacks t;
  t.on_user();
  Block a = kblock(0x1000, 2, EndKind::DirectCall, 0x2000);  // calls F
  Block f = kblock(0x2000, 2, EndKind::SoftInt);              // F: INT3 at 0x2004
  Block handler = kblock(0x9000, 3, EndKind::Iret);
  Block callee = kblock(0x3000, 3, EndKind::Return);
  Block f_rest = kblock(0x2009, 2, EndKind::Return);
  Block a_rest = kblock(0x1004, 2, EndKind::Fallthrough);
  t.on_kernel_block(a, 1);
  t.on_call(kTaskA + 0xf00, a.next);
  t.on_kernel_block(f, 2);
  t.on_kernel_block(handler, 3);  // the INT3
  t.on_iret(kTaskA + 0xd00);
  t.on_kernel_block(callee, 4);   // where the handler sent it
  EXPECT_EQ(stack_of(t), (S{"1004"})) << "the emulated call itself is not seen";
  t.on_return(kTaskA + 0xe00);
  t.on_kernel_block(f_rest, 5);
  EXPECT_EQ(stack_of(t), (S{"1004"})) << "F's frame stays";
  t.on_return(kTaskA + 0xf00);
  t.on_kernel_block(a_rest, 6);
  EXPECT_EQ(stack_of(t), S{});
  EXPECT_EQ(t.count(TruthStacks::kEmpty, 6), 1u);
}

TEST(TruthStacks, ACallAtOrAboveDeadFramesDropsThem) {
  // FILL_RETURN_BUFFER: calls that never return, then the stack pointer moves back up.
  TruthStacks t;
  t.on_user();
  Block a = kblock(0x1000, 2, EndKind::DirectCall, 0x1000);  // calls the next block: itself
  t.on_kernel_block(a, 1);
  for (int i = 1; i <= 16; ++i) {
    t.on_call(kTaskA + 0x1000 - 8 * i, 0x1100 + i);
    t.on_kernel_block(a, 1);
  }
  EXPECT_EQ(stack_of(t).size(), 16u);
  t.on_call(kTaskA + 0x1000 - 8, 0x2222);
  t.on_kernel_block(a, 1);
  EXPECT_EQ(stack_of(t), (S{"2222"}));
}

TEST(TruthStacks, AnInterruptFrameTellsWhereItStruckWhenItsIretRuns) {
  TruthStacks t;
  t.on_user();
  Block a = kblock(0x1000, 2, EndKind::DirectCall, 0x2000);
  Block f = kblock(0x2000, 3, EndKind::Fallthrough);  // runs on to 0x2006...
  Block handler = kblock(0x9000, 2, EndKind::Iret);
  Block resume = kblock(0x2006, 2, EndKind::Fallthrough);
  t.on_kernel_block(a, 1);
  t.on_call(kTaskA + 0xf00, a.next);
  t.on_kernel_block(f, 2);
  t.on_kernel_block(handler, 3);  // ... but the handler ran: an interrupt
  const uint32_t irq = t.top();
  EXPECT_TRUE(t.node(irq).interrupt);
  EXPECT_EQ(t.count(irq, 3), 1u);
  t.on_iret(kTaskA + 0xe00);
  t.on_kernel_block(resume, 4);
  EXPECT_EQ(t.node(irq).ret, 0x2006u);
  EXPECT_EQ(stack_of(t), (S{"1004"}));
}

TEST(TruthStacks, ACallAnInterruptStruckRightAfterCountsWhenItsIretReturnsToTheCallee) {
  TruthStacks t;
  t.on_user();
  Block a = kblock(0x1000, 2, EndKind::DirectCall, 0x2000);
  Block handler = kblock(0x9000, 2, EndKind::Iret);
  Block callee = kblock(0x2000, 2, EndKind::Fallthrough);
  t.on_kernel_block(a, 1);
  t.on_call(kTaskA + 0xf00, a.next);
  t.on_kernel_block(handler, 2);  // the call retired; the callee's first instruction had not run
  EXPECT_EQ(t.transitions(a.last, 0x9000, TruthStacks::Transition::Call), 0u);
  t.on_iret(kTaskA + 0xe00);
  t.on_kernel_block(callee, 3);
  EXPECT_EQ(t.transitions(a.last, 0x2000, TruthStacks::Transition::Call), 1u);
  EXPECT_EQ(stack_of(t), (S{"1004"}));
}

TEST(TruthStacks, AnIrqStackStacksOnTheTaskStackAndIsLeftByTheNextSlotBelowIt) {
  TruthStacks t;
  t.on_user();
  Block a = kblock(0x1000, 2, EndKind::DirectCall, 0x2000);
  Block b = kblock(0x2000, 2, EndKind::DirectCall, 0x3000);
  Block c = kblock(0x3000, 2, EndKind::Return);
  Block d = kblock(0x2004, 2, EndKind::Return);
  Block e = kblock(0x1004, 2, EndKind::Fallthrough);
  t.on_kernel_block(a, 1);
  t.on_call(kTaskA + 0xf00, a.next);
  t.on_kernel_block(b, 2);
  t.on_call(kIrq + 0x3ff8, b.next);  // call_on_irqstack
  t.on_kernel_block(c, 3);
  EXPECT_EQ(stack_of(t), (S{"1004", "2004"}));
  t.on_return(kIrq + 0x3ff8);
  t.on_kernel_block(d, 4);
  t.on_return(kTaskA + 0xf00);  // back on the task stack
  t.on_kernel_block(e, 5);
  EXPECT_EQ(stack_of(t), S{});
}

TEST(TruthStacks, ATaskSwitchBringsTheNextTasksOwnFramesBack) {
  TruthStacks t;
  Block x = kblock(0x1000, 2, EndKind::DirectCall, 0x2000);
  Block y = kblock(0x2000, 2, EndKind::DirectCall, 0x3000);   // calls __switch_to_asm
  Block sw = kblock(0x3000, 2, EndKind::Return);               // ... whose ret runs on the next task's stack
  Block in_y = kblock(0x2004, 2, EndKind::Return);
  Block in_x = kblock(0x1004, 2, EndKind::Fallthrough);
  // Task B runs first and switches out two calls deep.
  t.on_user();
  t.on_kernel_block(x, 1);
  t.on_call(kTaskB + 0xf00, x.next);
  t.on_kernel_block(y, 2);
  t.on_call(kTaskB + 0xef8, y.next);
  t.on_kernel_block(sw, 3);
  EXPECT_EQ(stack_of(t), (S{"1004", "2004"}));
  // Task A: a kernel entry of its own, the same two calls, the switch to B.
  t.on_user();
  t.on_kernel_block(x, 1);
  t.on_call(kTaskA + 0xf00, x.next);
  t.on_kernel_block(y, 2);
  t.on_call(kTaskA + 0xef8, y.next);
  t.on_kernel_block(sw, 3);
  t.on_return(kTaskB + 0xef8);  // B's frame on B's stack
  t.on_kernel_block(in_y, 4);
  EXPECT_EQ(stack_of(t), (S{"1004"}));  // B's own frames, not A's
  t.on_return(kTaskB + 0xf00);
  t.on_kernel_block(in_x, 5);
  EXPECT_EQ(stack_of(t), S{});
  EXPECT_EQ(t.top(), TruthStacks::kEmpty);
}

TEST(TruthStacks, AFirstCallDeepInAnEmptyStackIsATaskSwitchNotAnIrqStack) {
  // __switch_to_asm stuffs the return stack buffer with calls on the next
  // task's stack before anything returns there.
  TruthStacks t;
  t.on_user();
  Block x = kblock(0x1000, 2, EndKind::DirectCall, 0x2000);
  Block stuff = kblock(0x3000, 2, EndKind::DirectCall, 0x3000);
  t.on_kernel_block(x, 1);
  t.on_call(kTaskA + 0x3f00, x.next);
  t.on_kernel_block(stuff, 2);
  t.on_call(kTaskB + 0x2e00, stuff.next);
  t.on_kernel_block(stuff, 2);
  EXPECT_EQ(stack_of(t), (S{"?", "3004"})) << "not on top of task A's 1004";
}

TEST(TruthStacks, AReturnBelowEverythingSeenLeavesTheBaseUnknown) {
  TruthStacks t;  // a trace that starts inside the kernel
  Block a = kblock(0x1000, 2, EndKind::Return);
  Block b = kblock(0x3000, 2, EndKind::Fallthrough);
  t.on_kernel_block(a, 1);
  t.on_return(kTaskA + 0xf00);
  t.on_kernel_block(b, 2);
  EXPECT_EQ(t.top(), TruthStacks::kBaseUnknown);
}

TEST(TruthStacks, PastItsNodeLimitItStopsCountingAndSaysSo) {
  TruthStacks t(4);
  Block a = kblock(0x1000, 2, EndKind::DirectCall, 0x1000);
  t.on_user();
  t.on_kernel_block(a, 1);
  for (int i = 1; i <= 4; ++i) {
    t.on_call(kTaskA + 0x1000 - 16 * i, 0x1100 + i);
    t.on_kernel_block(a, 1);
  }
  EXPECT_TRUE(t.full());
  const std::vector<const Block*> blocks = {nullptr, &a};
  char* text = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&text, &size);
  t.write(f, 0, blocks);
  std::fclose(f);
  const std::string out(text, size);
  std::free(text);
  EXPECT_NE(out.find("\nincomplete "), std::string::npos) << out;
  t.reset();  // the next trace starts with room again
  EXPECT_FALSE(t.full());
}

}  // namespace
