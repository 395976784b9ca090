// PieceWalk, the decoder's per-piece state machine, one transition at a
// time (white box: host/decode/src/piece_walk.h). Function ids are small
// numbers; 0 is Symbolizer::kUnknown.
#include "piece_walk.h"

#include <gtest/gtest.h>

namespace kt {
namespace {

constexpr uint32_t kA = 1, kB = 2, kC = 3, kD = 4, kThunk = 5, kSwitch = 6;
constexpr uint32_t kBase = 7;  // the [base unknown] frame's id
constexpr uint32_t kEntry = 8;  // an event entry (asm_sysvec_apic_timer_interrupt)

class PieceWalkTest : public ::testing::Test {
 protected:
  PieceWalkTest() {
    s_.fn_insns.assign(9, 0);
    s_.fn_calls.assign(9, 0);
    s_.node_insns.assign(1, 0);
  }
  // The stack of the walk's current node, root first ("M0" for a base marker
  // with no frames popped, "M2" with two, "W1M0" for the first task
  // switch's segment).
  std::string stack(const PieceWalk& w) const { return stack_of(w.current()); }
  std::string stack_of(uint32_t node) const {
    std::vector<uint32_t> path;
    tree_.path_of(node, path);
    std::string out;
    for (uint32_t f : path) {
      if (!out.empty()) out += ">";
      out += (f & kStackMarker) ? (marker_segment(f) ? "W" + std::to_string(marker_segment(f)) : std::string()) + "M" +
                                      std::to_string(marker_popped(f))
             : f == kBase       ? std::string("?")
             : f == kThunk      ? std::string("T")
             : f == kSwitch     ? std::string("S")
             : f == kEntry      ? std::string("E")
                                : std::string(1, static_cast<char>('@' + f));
    }
    return out;
  }
  static PieceWalk::Block block(uint32_t fn, uint8_t cls, uint32_t ninsn = 4, bool at_entry = true) {
    const FunctionKind kind = fn == kThunk    ? kFnThunk
                              : fn == kSwitch ? kFnTaskSwitch
                              : fn == kEntry  ? kFnEventEntry
                                              : kFnPlain;
    return {fn, ninsn, cls, at_entry, kind};
  }
  PieceWalk walk(uint64_t start_time) { return PieceWalk(tree_, s_, start_time, kBase); }
  CallTree tree_;
  PieceScratch s_;
};

TEST_F(PieceWalkTest, FirstBlockHangsUnderTheBaseMarker) {
  PieceWalk w = walk(100);
  EXPECT_EQ(w.final_node(), UINT32_MAX);  // no block: the stack it began with is unchanged
  EXPECT_TRUE(w.leader());
  w.on_block(block(kA, kClsOther));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_FALSE(w.leader());  // straight-line code: the next block continues this one
  EXPECT_EQ(s_.insns, 4u);
  EXPECT_EQ(s_.fn_insns[kA], 4u);
}

TEST_F(PieceWalkTest, CallPushesCountsTheEdgeAndReturnPops) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  EXPECT_EQ(w.pending(), PieceWalk::Pending::Call);
  EXPECT_TRUE(w.leader());
  w.on_block(block(kB, kClsReturn));
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(s_.fn_calls[kB], 1u);
  EXPECT_EQ((s_.edges[(uint64_t{kA} << 32) | kB]), 1u);
  w.on_block(block(kA, kClsOther));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(w.underflows(), 0u);
}

// sync_core() serializes with an IRET to its own next instruction: A calls
// B, B calls C, C's IRET lands right after itself. That returns from no
// call; taken as one it popped B (the frame below C). C's own return then
// lands in B.
TEST_F(PieceWalkTest, AnIretToTheNextInstructionReturnsFromNothing) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kB, kClsCall));
  w.on_block(block(kC, kClsReturn));  // ends in the IRET
  PieceWalk::Block after = block(kC, kClsReturn, 2, false);
  after.after_last = true;
  w.on_block(after);
  EXPECT_EQ(stack(w), "M0>A>B>C");
  w.on_block(block(kB, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "M0>A>B");
  // The same blocks, the IRET's destination not right after it: a return.
  PieceWalk v = walk(0);
  v.on_block(block(kA, kClsCall));
  v.on_block(block(kB, kClsCall));
  v.on_block(block(kC, kClsReturn));
  v.on_block(block(kB, kClsOther, 4, false));
  EXPECT_EQ(stack(v), "M0>A>B");
}

TEST_F(PieceWalkTest, ReturnBelowThePieceBaseCountsAnUnderflowInsteadOfInventingFrames) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsReturn));
  w.on_block(block(kB, kClsReturn));
  EXPECT_EQ(w.underflows(), 1u);
  EXPECT_EQ(stack(w), "M1>B");
  w.on_block(block(kC, kClsOther));
  EXPECT_EQ(w.underflows(), 2u);
  EXPECT_EQ(stack(w), "M2>C");
}

TEST_F(PieceWalkTest, ASelfCallNotAtTheEntryIsNoFrame) {
  // FILL_RETURN_BUFFER: call the next instruction, never return.
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kA, kClsCall, 2, /*at_entry=*/false));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(s_.fn_calls[kA], 0u);
  w.on_block(block(kA, kClsOther, 1, /*at_entry=*/true));  // real recursion enters at the entry
  EXPECT_EQ(stack(w), "M0>A>A");
  EXPECT_EQ(s_.fn_calls[kA], 1u);
}

TEST_F(PieceWalkTest, AJumpIntoAnotherFunctionReplacesTheTopAndATailCallCounts) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kB, kClsJump));
  w.on_block(block(kC, kClsJump));  // tail call B -> C, at C's entry
  EXPECT_EQ(stack(w), "M0>A>C");
  EXPECT_EQ(s_.fn_calls[kC], 1u);
  EXPECT_EQ((s_.edges[(uint64_t{kB} << 32) | kC]), 1u);
  w.on_block(block(kD, kClsOther, 4, /*at_entry=*/false));  // a jump into D's middle: no call
  EXPECT_EQ(stack(w), "M0>A>D");
  EXPECT_EQ(s_.fn_calls[kD], 0u);
  w.on_block(block(kA, kClsOther, 4, /*at_entry=*/true));  // falling through into a symbol: no call
  EXPECT_EQ(s_.fn_calls[kA], 0u);
}

TEST_F(PieceWalkTest, AnInterruptPushesTheHandlerOnTop) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsOther));
  w.on_interrupt({kA, false, kFnPlain});
  EXPECT_EQ(w.pending(), PieceWalk::Pending::Push);
  EXPECT_TRUE(w.leader());
  w.on_block(block(kB, kClsOther));
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(s_.fn_calls[kB], 0u);  // an interrupt is not a call
}

TEST_F(PieceWalkTest, TracingChangeRestartsTheStackEmpty) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_tracing_changed();
  EXPECT_EQ(w.current(), 0u);
  EXPECT_EQ(w.pending(), PieceWalk::Pending::None);
  EXPECT_EQ(w.final_node(), 0u);  // reset: the piece ends on a known-empty stack
  w.on_block(block(kB, kClsReturn));
  EXPECT_EQ(stack(w), "B");  // no marker once the stack is known
  w.on_block(block(kC, kClsOther));
  EXPECT_EQ(w.underflows(), 0u);  // returns below a reset stack are not the base's frames
  EXPECT_EQ(stack(w), "C");
}

TEST_F(PieceWalkTest, OverflowMakesMissingTextTheOverflowsLossUntilALaterTime) {
  PieceWalk w = walk(100);
  w.on_block(block(kA, kClsCall));
  w.on_overflow();
  EXPECT_TRUE(w.time_uncertain());
  EXPECT_EQ(w.current(), 0u);
  EXPECT_EQ(w.on_error(DecodeErrorKind::NoText), DecodeErrorKind::Overflow);
  EXPECT_EQ(w.on_error(DecodeErrorKind::Desync), DecodeErrorKind::Desync);
  w.on_time(100);  // not later: still uncertain
  EXPECT_TRUE(w.time_uncertain());
  w.on_time(101);
  EXPECT_FALSE(w.time_uncertain());
  EXPECT_EQ(w.now(), 101u);
  EXPECT_EQ(w.on_error(DecodeErrorKind::NoText), DecodeErrorKind::NoText);
}

TEST_F(PieceWalkTest, TimeNeverGoesBack) {
  PieceWalk w = walk(500);
  w.on_time(400);
  EXPECT_EQ(w.now(), 500u);
  w.on_time(600);
  EXPECT_EQ(w.now(), 600u);
}

TEST_F(PieceWalkTest, AnErrorResetsTheStack) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_error(DecodeErrorKind::Desync);
  EXPECT_EQ(w.current(), 0u);
  EXPECT_EQ(w.pending(), PieceWalk::Pending::None);
  w.on_block(block(kB, kClsOther));
  EXPECT_EQ(stack(w), "?>B");  // the frames below are unknown, and shown so
}

TEST_F(PieceWalkTest, StacksAreBoundedAt256Frames) {
  PieceWalk w = walk(0);
  for (int i = 0; i < 400; ++i) w.on_block(block(1 + i % 3, kClsCall));
  EXPECT_LE(tree_.node(w.current()).depth, 257u);
}

TEST_F(PieceWalkTest, AnInterruptStrikingAfterACallRootsTheHandlerOnTheCallee) {
  // The call retired; the interrupt struck before the callee's first
  // instruction ran (the FUP is at its entry).
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_interrupt({kB, true, kFnPlain});
  w.on_block(block(kC, kClsReturn));  // the handler, on top of B
  EXPECT_EQ(stack(w), "M0>A>B>C");
  EXPECT_EQ(s_.fn_calls[kB], 1u);  // the call did happen
  EXPECT_EQ(s_.fn_calls[kC], 0u);
  w.on_block(block(kB, kClsReturn, 4, /*at_entry=*/true));  // IRET back into B
  EXPECT_EQ(stack(w), "M0>A>B");
  w.on_block(block(kA, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "M0>A");
}

TEST_F(PieceWalkTest, AnInterruptAtThePiecesStartGoesOnTopOfWhereItStruck) {
  PieceWalk w = walk(0);
  w.on_interrupt({kA, false, kFnPlain});
  w.on_block(block(kB, kClsOther));
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(w.first_fn(), kA);
  EXPECT_FALSE(w.first_at_entry());
}

TEST_F(PieceWalkTest, ARetpolineThunkIsSeenThroughByItsReturn) {
  // call thunk; thunk: call 1f (no frame); 1: mov %rax,(%rsp); ret -> B
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kThunk, kClsCall, 1));
  EXPECT_EQ(stack(w), "M0>A>T");
  EXPECT_EQ(s_.fn_calls[kThunk], 0u);
  w.on_block(block(kThunk, kClsReturn, 2, /*at_entry=*/false));
  w.on_block(block(kB, kClsReturn));
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(s_.fn_calls[kB], 1u);
  EXPECT_EQ((s_.edges[(uint64_t{kA} << 32) | kB]), 1u);
  EXPECT_EQ(s_.edges.count((uint64_t{kA} << 32) | kThunk), 0u);
  w.on_block(block(kA, kClsOther, 4, false));  // B returns to A, not below it
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(w.underflows(), 0u);
}

// An interrupt that strikes inside a thunk goes on top of the thunk's frame;
// it is not where the thunk goes. Taken as the thunk's destination, the
// handler replaced the thunk, the IRET back into the thunk replaced its
// caller, and the retpoline's return then lost a frame (a main job lost
// do_syscall_64 and __do_sys_finit_module under load_module this way).
// The handler's own thunk (__sysvec_apic_timer_interrupt's) comes and goes
// meanwhile: the IRET back into the thunk's frame is in that thunk again.
TEST_F(PieceWalkTest, AnInterruptInsideAThunkGoesOnTopOfItsFrame) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kThunk, kClsCall, 1));                          // call thunk; call 1f
  w.on_interrupt({kThunk, false, kFnThunk});                       // struck at 1f
  w.on_block(block(kEntry, kClsCall));                             // the handler calls through a thunk of its own
  EXPECT_EQ(stack(w), "M0>A>T>E");
  EXPECT_EQ(s_.fn_calls[kEntry], 0u);
  w.on_block(block(kThunk, kClsJump, 2));
  w.on_block(block(kC, kClsReturn));
  EXPECT_EQ(stack(w), "M0>A>T>E>C");
  w.on_block(block(kEntry, kClsFarReturn, 4, false));              // IRET
  EXPECT_EQ(stack(w), "M0>A>T>E");
  w.on_block(block(kThunk, kClsReturn, 2, /*at_entry=*/false));    // back in the thunk: mov; ret
  EXPECT_EQ(stack(w), "M0>A>T");
  w.on_block(block(kB, kClsReturn));                               // the retpoline's return goes to B
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(s_.fn_calls[kB], 1u);
  EXPECT_EQ((s_.edges[(uint64_t{kA} << 32) | kB]), 1u);
  w.on_block(block(kA, kClsOther, 4, false));                      // B returns to A
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(w.underflows(), 0u);
}

TEST_F(PieceWalkTest, AThunkLeftByItsIndirectJumpIsSeenThroughToo) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kThunk, kClsJump, 2));  // lfence; jmp *%rax
  w.on_block(block(kB, kClsOther));
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(s_.fn_calls[kB], 1u);
}

TEST_F(PieceWalkTest, ATailCallThroughAThunkReplacesTheTopAndCountsAsATailCall) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kB, kClsJump));      // B: jmp __x86_indirect_thunk_rax
  w.on_block(block(kThunk, kClsCall, 1));
  w.on_block(block(kThunk, kClsReturn, 2, false));
  w.on_block(block(kC, kClsOther));
  EXPECT_EQ(stack(w), "M0>A>C");
  EXPECT_EQ(s_.fn_calls[kThunk], 0u);
  EXPECT_EQ(s_.fn_calls[kC], 1u);  // B tail-called C
  EXPECT_EQ((s_.edges[(uint64_t{kB} << 32) | kC]), 1u);
}

TEST_F(PieceWalkTest, AJumpThroughAThunkIntoTheMiddleOfAFunctionIsNoCall) {
  // A switch's jump table through the thunk.
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kB, kClsJump));
  w.on_block(block(kThunk, kClsJump, 2));
  w.on_block(block(kB, kClsOther, 4, /*at_entry=*/false));
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(s_.fn_calls[kB], 1u);  // the call from A only
}

TEST_F(PieceWalkTest, TheReturnOutOfATaskSwitchStartsASegmentAndKeepsTheLeavingTasksStack) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));       // the old task: A calls __schedule (B)
  w.on_block(block(kB, kClsCall));       // B calls __switch_to_asm
  w.on_block(block(kSwitch, kClsCall, 3));
  w.on_block(block(kSwitch, kClsJump, 5, /*at_entry=*/false));  // RSB stuffing, then jmp __switch_to
  w.on_block(block(kC, kClsCall));       // __switch_to calls D ...
  w.on_block(block(kD, kClsReturn));     // ... which returns into it
  EXPECT_EQ(stack(w), "M0>A>B>C>D");
  w.on_block(block(kC, kClsReturn, 4, false));
  EXPECT_EQ(stack(w), "M0>A>B>C");
  w.on_block(block(kB, kClsReturn, 4, false));  // __switch_to returns: the next task's __schedule
  EXPECT_EQ(stack(w), "W1M0>B");                // on the next task's stack (the stitcher's to fill)
  ASSERT_EQ(s_.switch_out.size(), 1u);
  EXPECT_EQ(stack_of(s_.switch_out[0]), "M0>A>B");  // the old task's stack, less the switch
  w.on_block(block(kD, kClsOther, 4, false));  // returns below it pop the next task's frames
  EXPECT_EQ(stack(w), "W1M1>D");
  EXPECT_EQ(w.underflows(), 1u);
  // A second switch: a second segment, whose leaving stack is the first's.
  w.on_block(block(kD, kClsCall));
  w.on_block(block(kSwitch, kClsJump, 3));
  w.on_block(block(kC, kClsReturn, 4, false));
  w.on_block(block(kA, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "W2M0>A");
  ASSERT_EQ(s_.switch_out.size(), 2u);
  EXPECT_EQ(stack_of(s_.switch_out[1]), "W1M1>D");
}

TEST_F(PieceWalkTest, APieceThatBeginsInsideTheSwitchLeavesItOntoTheNextTask) {
  PieceWalk w = walk(0);
  w.on_block(block(kSwitch, kClsReturn, 4, false));  // the PSB fell inside __switch_to
  w.on_block(block(kB, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "W1M0>B");
  ASSERT_EQ(s_.switch_out.size(), 1u);
  EXPECT_EQ(stack_of(s_.switch_out[0]), "M0");  // the old task: the piece's start, less the switch frame
}

// The PSB fell in a function __switch_to called (save_fpregs_to_fpstate):
// its return into __switch_to is below the piece's start, and __switch_to's
// own return then goes onto the next task's stack. Before, the next task's
// returns popped the old task's frames one by one (the idle task's
// cpu_startup_entry on a polling task's __x64_sys_poll).
TEST_F(PieceWalkTest, APieceThatBeginsBelowTheSwitchLeavesItOntoTheNextTask) {
  PieceWalk w = walk(0);
  w.on_block(block(kC, kClsReturn, 4, false));       // save_fpregs_to_fpstate returns
  w.on_block(block(kSwitch, kClsReturn, 4, false));  // into __switch_to, which returns
  EXPECT_EQ(stack(w), "M1>S");
  w.on_block(block(kB, kClsReturn, 4, false));       // the next task's __schedule
  EXPECT_EQ(stack(w), "W1M0>B");
  ASSERT_EQ(s_.switch_out.size(), 1u);
  EXPECT_EQ(stack_of(s_.switch_out[0]), "M1");
  w.on_block(block(kA, kClsOther, 4, false));        // ... and its caller, below the segment's start
  EXPECT_EQ(stack(w), "W1M1>A");
}

TEST_F(PieceWalkTest, AnOverflowRestartsOnAnUnknownBaseAndTracingOnRestartsEmpty) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_overflow();
  w.on_block(block(kB, kClsOther));
  EXPECT_EQ(stack(w), "?>B");
  w.on_tracing_changed();
  w.on_block(block(kC, kClsOther));
  EXPECT_EQ(stack(w), "C");
}

TEST_F(PieceWalkTest, AnIrqStackSwitchIsACallAndItsReturnComesBackToTheTaskStack) {
  // asm_sysvec (B) -> sysvec (C) -> call_on_irqstack: a call with the stack
  // pointer on the IRQ stack (D); PT shows only the call and the return.
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsOther, 4, false));
  w.on_interrupt({kA, false, kFnPlain});
  w.on_block(block(kB, kClsCall));
  w.on_block(block(kC, kClsCall));
  w.on_block(block(kD, kClsReturn));
  EXPECT_EQ(stack(w), "M0>A>B>C>D");
  w.on_block(block(kC, kClsReturn, 4, false));
  w.on_block(block(kB, kClsReturn, 4, false));  // IRET
  w.on_block(block(kA, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(w.underflows(), 0u);
}

TEST_F(PieceWalkTest, AnNmiInsideAnInterruptHandlerNestsOnIt) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsOther, 4, false));
  w.on_interrupt({kA, false, kFnPlain});
  w.on_block(block(kB, kClsOther));           // the interrupt handler ...
  w.on_interrupt({kB, false, kFnPlain});      // ... struck by an NMI
  w.on_block(block(kC, kClsReturn));          // the NMI handler's IRET
  EXPECT_EQ(stack(w), "M0>A>B>C");
  w.on_block(block(kB, kClsReturn, 4, false));  // back in the interrupt handler; its IRET
  EXPECT_EQ(stack(w), "M0>A>B");
  w.on_block(block(kA, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "M0>A");
}

TEST_F(PieceWalkTest, ACallIntoABpfTrampolineAndTheFunctionItCallsBackAreFrames) {
  // A's call to B lands on B's patched fentry: call trampoline (T is plain
  // here: a dynamic symbol), which calls B's body after the patched call.
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kB, kClsCall, 1));             // B: call bpf_trampoline
  w.on_block(block(kC, kClsCall));                // the trampoline calls B+5
  w.on_block(block(kB, kClsReturn, 3, false));    // B's body, a call into B from another function
  EXPECT_EQ(stack(w), "M0>A>B>C>B");
  EXPECT_EQ(s_.fn_calls[kB], 2u);
  w.on_block(block(kC, kClsReturn, 2, false));    // back in the trampoline, whose ret skips B: to A
  w.on_block(block(kA, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(w.underflows(), 0u);
}

TEST_F(PieceWalkTest, TheLastPendingTransitionAndTheFirstLandingAreKeptForStitching) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsOther, 4, false));
  w.on_block(block(kB, kClsReturn));
  EXPECT_EQ(w.first_fn(), kA);
  EXPECT_EQ(w.pending(), PieceWalk::Pending::Return);  // the next piece's first block is where it returns
  EXPECT_FALSE(w.end_state(0).switch_return);
}

// A piece that ends on the return out of a task switch says so: the next
// piece runs on the next task's stack.
TEST_F(PieceWalkTest, APieceEndingOnTheReturnOutOfATaskSwitchSaysSo) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kSwitch, kClsReturn));  // __switch_to_asm ... __switch_to's ret
  EXPECT_EQ(stack(w), "M0>A>S");
  EXPECT_TRUE(w.end_state(0).switch_return);
  PieceWalk v = walk(0);
  v.on_block(block(kA, kClsCall));
  v.on_block(block(kB, kClsReturn));
  EXPECT_FALSE(v.end_state(0).switch_return);
}

// text_poke_bp's INT3 handler emulates the CALL at a site being rewritten:
// B, struck by the INT3 in its middle, goes on in D's entry by the IRET, and
// D's return comes back to B. The IRET is a call B made by proxy: D stands
// on B. (Taken as a return, D replaced B, and D's return to B then replaced
// A: a frame lost per emulated call, seen thousands of times in ftrace's
// patching of `call __fentry__` sites.)
TEST_F(PieceWalkTest, AnIretIntoAnotherFunctionsEntryIsACallByProxy) {
  PieceWalk w = walk(0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kB, kClsOther, 4, true));
  w.on_interrupt({kB, false, kFnPlain});        // the INT3 at the site
  w.on_block(block(kC, kClsFarReturn));         // its handler, ending in the IRET
  EXPECT_EQ(stack(w), "M0>A>B>C");
  w.on_block(block(kD, kClsReturn));            // the emulated call's target
  EXPECT_EQ(stack(w), "M0>A>B>D");
  EXPECT_EQ((s_.edges[(uint64_t{kB} << 32) | kD]), 1u);
  EXPECT_EQ(s_.fn_calls[kD], 1u);
  w.on_block(block(kB, kClsReturn, 4, false));  // D returns to the site's next instruction
  EXPECT_EQ(stack(w), "M0>A>B");
  w.on_block(block(kA, kClsOther, 4, false));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(w.underflows(), 0u);
  // An IRET back into the middle of what it interrupted is a plain return,
  // and a near return into a function's entry is no call.
  PieceWalk v = walk(0);
  v.on_block(block(kA, kClsCall));
  v.on_block(block(kB, kClsOther, 4, true));
  v.on_interrupt({kB, false, kFnPlain});
  v.on_block(block(kC, kClsFarReturn));
  v.on_block(block(kB, kClsCall, 4, false));
  EXPECT_EQ(stack(v), "M0>A>B");
  v.on_block(block(kC, kClsReturn));
  v.on_block(block(kD, kClsOther, 4, true));
  EXPECT_EQ(stack(v), "M0>A>D");  // the return replaced B (a tail call's return)
  EXPECT_EQ(s_.fn_calls[kD], 1u);  // only the first walk's
}

// No return address is an event entry: a handler's first block right after
// a return (the trace had no event for it: the interrupt struck where the
// return went, before its first instruction) stands on the frame the return
// went to, and is no call. Its IRET comes back there.
TEST_F(PieceWalkTest, AReturnIntoAnEventEntryIsAnInterruptWhereItWent) {
  for (uint8_t ret : {kClsReturn, kClsFarReturn}) {
    PieceWalk w = walk(0);
    w.on_block(block(kA, kClsCall));
    w.on_block(block(kB, kClsCall));
    w.on_block(block(kC, ret));
    w.on_block(block(kEntry, kClsFarReturn));
    EXPECT_EQ(stack(w), "M0>A>B>E") << int(ret);
    EXPECT_EQ(s_.fn_calls[kEntry], 0u);
    w.on_block(block(kB, kClsReturn, 4, false));
    EXPECT_EQ(stack(w), "M0>A>B");
    w.on_block(block(kA, kClsOther, 4, false));
    EXPECT_EQ(stack(w), "M0>A");
  }
}

}  // namespace
}  // namespace kt
