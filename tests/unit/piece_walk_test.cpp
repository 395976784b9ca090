// PieceWalk, the decoder's per-piece state machine, one transition at a
// time (white box: host/decode/src/piece_walk.h). Function ids are small
// numbers; 0 is Symbolizer::kUnknown.
#include "piece_walk.h"

#include <gtest/gtest.h>

namespace kt {
namespace {

constexpr uint32_t kA = 1, kB = 2, kC = 3;

class PieceWalkTest : public ::testing::Test {
 protected:
  PieceWalkTest() {
    s_.fn_insns.assign(8, 0);
    s_.fn_calls.assign(8, 0);
    s_.node_insns.assign(1, 0);
  }
  // The stack of the walk's current node, root first ("M0" for a base marker
  // with no frames popped, "M2" with two).
  std::string stack(const PieceWalk& w) const {
    std::vector<uint32_t> path;
    tree_.path_of(w.current(), path);
    std::string out;
    for (uint32_t f : path) {
      if (!out.empty()) out += ">";
      out += (f & kStackMarker) ? "M" + std::to_string(f & ~kStackMarker) : std::string(1, static_cast<char>('@' + f));
    }
    return out;
  }
  static PieceWalk::Block block(uint32_t fn, uint8_t cls, uint32_t ninsn = 4, bool at_entry = true) {
    return {fn, ninsn, cls, at_entry};
  }
  CallTree tree_;
  PieceScratch s_;
};

TEST_F(PieceWalkTest, FirstBlockHangsUnderTheBaseMarker) {
  PieceWalk w(tree_, s_, 100);
  EXPECT_EQ(w.final_node(), UINT32_MAX);  // no block: the stack it began with is unchanged
  EXPECT_TRUE(w.leader());
  w.on_block(block(kA, kClsOther));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_FALSE(w.leader());  // straight-line code: the next block continues this one
  EXPECT_EQ(s_.insns, 4u);
  EXPECT_EQ(s_.fn_insns[kA], 4u);
}

TEST_F(PieceWalkTest, CallPushesCountsTheEdgeAndReturnPops) {
  PieceWalk w(tree_, s_, 0);
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

TEST_F(PieceWalkTest, ReturnBelowThePieceBaseCountsAnUnderflowInsteadOfInventingFrames) {
  PieceWalk w(tree_, s_, 0);
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
  PieceWalk w(tree_, s_, 0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kA, kClsCall, 2, /*at_entry=*/false));
  EXPECT_EQ(stack(w), "M0>A");
  EXPECT_EQ(s_.fn_calls[kA], 0u);
  w.on_block(block(kA, kClsOther, 1, /*at_entry=*/true));  // real recursion enters at the entry
  EXPECT_EQ(stack(w), "M0>A>A");
  EXPECT_EQ(s_.fn_calls[kA], 1u);
}

TEST_F(PieceWalkTest, AJumpIntoAnotherFunctionReplacesTheTop) {
  PieceWalk w(tree_, s_, 0);
  w.on_block(block(kA, kClsCall));
  w.on_block(block(kB, kClsJump));
  w.on_block(block(kC, kClsOther));  // tail call B -> C
  EXPECT_EQ(stack(w), "M0>A>C");
  EXPECT_EQ(s_.fn_calls[kC], 0u);
}

TEST_F(PieceWalkTest, AnInterruptPushesTheHandlerOnTop) {
  PieceWalk w(tree_, s_, 0);
  w.on_block(block(kA, kClsOther));
  w.on_interrupt();
  EXPECT_EQ(w.pending(), PieceWalk::Pending::Push);
  EXPECT_TRUE(w.leader());
  w.on_block(block(kB, kClsOther));
  EXPECT_EQ(stack(w), "M0>A>B");
  EXPECT_EQ(s_.fn_calls[kB], 0u);  // an interrupt is not a call
}

TEST_F(PieceWalkTest, TracingChangeRestartsTheStackEmpty) {
  PieceWalk w(tree_, s_, 0);
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
  PieceWalk w(tree_, s_, 100);
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
  PieceWalk w(tree_, s_, 500);
  w.on_time(400);
  EXPECT_EQ(w.now(), 500u);
  w.on_time(600);
  EXPECT_EQ(w.now(), 600u);
}

TEST_F(PieceWalkTest, AnErrorResetsTheStack) {
  PieceWalk w(tree_, s_, 0);
  w.on_block(block(kA, kClsCall));
  w.on_error(DecodeErrorKind::Desync);
  EXPECT_EQ(w.current(), 0u);
  EXPECT_EQ(w.pending(), PieceWalk::Pending::None);
  w.on_block(block(kB, kClsOther));
  EXPECT_EQ(stack(w), "B");
}

TEST_F(PieceWalkTest, StacksAreBoundedAt256Frames) {
  PieceWalk w(tree_, s_, 0);
  for (int i = 0; i < 400; ++i) w.on_block(block(1 + i % 3, kClsCall));
  EXPECT_LE(tree_.node(w.current()).depth, 257u);
}

}  // namespace
}  // namespace kt
