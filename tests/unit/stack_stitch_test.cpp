// match_task_switches: the guest's log of task switches against the switches
// the decode saw, piece by piece (white box: host/decode/src/stack_stitch.h).
#include "stack_stitch.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kt {
namespace {

// Pieces of 1000 time units from `start`, with the given switch counts; the
// log holds a switch at each of `at` (PT time), to tids 1, 2, 3, ...
struct Case {
  std::vector<SwitchSpan> spans;
  std::vector<std::pair<uint64_t, uint32_t>> log;
};
Case make(const std::vector<uint32_t>& counts, const std::vector<uint64_t>& at, int64_t log_shift) {
  Case c;
  uint64_t t = 10'000;
  for (size_t i = 0; i < counts.size(); ++i, t += 1000)
    c.spans.push_back({t, i + 1 < counts.size() ? t + 1000 : 0, counts[i], true});
  for (size_t i = 0; i < at.size(); ++i)
    c.log.emplace_back(static_cast<uint64_t>(static_cast<int64_t>(at[i]) - log_shift), static_cast<uint32_t>(i + 1));
  return c;
}

TEST(MatchTaskSwitches, FindsTheClockOffsetAndMatchesEverySwitchInOrder) {
  // The log runs 5000 units early (its clock alignment) and each record
  // comes 20 units before its switch.
  const std::vector<uint64_t> at{10'100, 10'700, 11'950, 13'300, 13'400, 13'500, 14'020, 15'990};
  Case c = make({2, 1, 0, 3, 1, 1, 0}, at, 5000 + 20);
  SwitchMatch m = match_task_switches(c.spans, c.log);
  ASSERT_EQ(m.record.size(), 8u);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(m.record[static_cast<size_t>(i)], i);
  // Any offset that puts every switch in its piece will do; the true one is 5020.
  EXPECT_GE(m.offset, 5020 - 50);
  EXPECT_LE(m.offset, 5020 + 10);
}

TEST(MatchTaskSwitches, APieceWithAnErrorOrADifferentCountIsLeftUnmatched) {
  // 40 pieces with 1, 0, 2, 1, ... switches at uneven places; the log runs
  // 3000 units early.
  std::vector<uint32_t> counts;
  std::vector<uint64_t> at;
  for (uint32_t i = 0; i < 40; ++i) {
    counts.push_back(std::vector<uint32_t>{1, 0, 2, 1}[i % 4]);
    for (uint32_t k = 0; k < counts.back(); ++k) at.push_back(10'000 + 1000 * i + 150 + 400 * k + 37 * (i % 5));
  }
  // Piece 10 saw 2 switches, but the log has a third there; piece 20 had an error.
  const uint64_t extra = 10'000 + 1000 * 10 + 900;
  at.insert(std::upper_bound(at.begin(), at.end(), extra), extra);
  Case c = make(counts, at, 3000);
  c.spans[20].complete = false;
  SwitchMatch m = match_task_switches(c.spans, c.log);
  EXPECT_EQ(m.offset > 3000 - 150 && m.offset < 3000 + 100, true) << m.offset;
  size_t seen = 0, record = 0;
  for (size_t i = 0; i < 40; ++i)
    for (uint32_t k = 0; k < counts[i]; ++k, ++seen, ++record) {
      if (i == 10 || i == 20) {
        EXPECT_EQ(m.record[seen], -1) << "piece " << i;  // which ones they are is not guessed
      } else {
        EXPECT_EQ(m.record[seen], static_cast<int64_t>(record)) << "piece " << i;
      }
      if (i == 10 && k + 1 == counts[i]) ++record;  // the extra one
    }
}

TEST(MatchTaskSwitches, NoLogOrNoSwitchesMatchesNothing) {
  Case c = make({1, 0, 2}, {}, 0);
  SwitchMatch m = match_task_switches(c.spans, c.log);
  EXPECT_EQ(m.record, (std::vector<int64_t>{-1, -1, -1}));
  Case d = make({0, 0}, {10'500}, 0);
  EXPECT_TRUE(match_task_switches(d.spans, d.log).record.empty());
}

// land_piece_start, with the next piece's first block `fn` (at its entry or
// not, an event entry or not, at `first_ip`) after a piece that ended with
// `pending` (an IRET's when `far`, its last instruction at `last_ip`).
void land(std::vector<uint32_t>& prefix, PieceWalk::Pending pending, uint32_t fn, bool at_entry, bool event_entry,
          Profile& out, bool far = false, uint64_t last_ip = 0, uint64_t first_ip = 0) {
  PieceStacks next;
  next.first_fn = fn;
  next.first_at_entry = at_entry;
  next.first_event_entry = event_entry;
  next.first_ip = first_ip;
  land_piece_start(prefix, PieceEnd{static_cast<uint8_t>(pending), far, last_ip}, next, 9, out);
}

// The next piece's first block is a handler at its entry with nothing of its
// own that pushed it. Its marker's first function replaces the prefix's top,
// so the top is doubled for it: the handler stands on the function it struck
// (A>B>E once stitched), not in its place.
TEST(LandPieceStart, AnEventEntryThatBeginsAPieceStandsOnTheFunctionItStruck) {
  constexpr uint32_t kA = 1, kB = 2, kC = 3, kE = 4, kBase = 9;
  using P = PieceWalk::Pending;
  Profile out;
  // The previous piece ended on the IRET of a handler C that had struck B.
  std::vector<uint32_t> prefix{kA, kB, kC};
  land(prefix, P::Return, kE, true, true, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kB, kB}));
  // ... or on straight-line code in B.
  prefix = {kA, kB};
  land(prefix, P::None, kE, true, true, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kB, kB}));
  // A plain function after a return replaces the top as before.
  prefix = {kA, kB, kC};
  land(prefix, P::Return, kC, true, false, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kB}));
  // After an interrupt the handler is already pushed; after a jump it
  // replaces the jumper (irq_entries_start's stub jumps to its handler).
  prefix = {kA, kB};
  land(prefix, P::Push, kE, true, true, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kB, kE}));
  prefix = {kA, kB};
  land(prefix, P::Jump, kE, true, true, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kB}));
  // Nothing known to stand on: nothing doubled.
  prefix = {kBase};
  land(prefix, P::None, kE, true, true, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kBase}));
  EXPECT_EQ(out.functions[kE].calls, 1u);  // the jump into its entry counts as a tail call
}

// As PieceWalk::move: an IRET into another plain function's entry is a call
// by proxy (text_poke_bp's INT3 handler emulating a CALL in F), and an IRET
// to the instruction after it (sync_core()) returns from nothing. Before,
// a piece that began there popped a frame: a main job lost do_syscall_64
// under one finit_module, mod_verify_sig under another.
TEST(LandPieceStart, AnIretIntoAnotherFunctionsEntryIsACallAndOneToTheNextInstructionPopsNothing) {
  constexpr uint32_t kA = 1, kF = 2, kR = 3, kT = 4, kS = 5;
  using P = PieceWalk::Pending;
  Profile out;
  std::vector<uint32_t> prefix{kA, kF, kR};  // the IRET ran in R, the entry code, on top of F
  land(prefix, P::Return, kT, true, false, out, true);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kF, kF}));  // T replaces the top: A>F>T
  EXPECT_EQ(out.functions[kT].calls, 1u);
  EXPECT_EQ((out.edges[{kF, kT}]), 1u);
  // The same IRET into F's own entry (an INT3 at F's first instruction,
  // retried) returns to F.
  prefix = {kA, kF, kR};
  land(prefix, P::Return, kF, true, false, out, true);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kF}));
  // A near return into a plain entry is still a plain return.
  prefix = {kA, kF, kR};
  land(prefix, P::Return, kT, true, false, out, false);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kF}));
  // sync_core(): IRET at 0x1000 (2 bytes), the next piece begins at 0x1002 in S.
  prefix = {kA, kF, kS};
  land(prefix, P::Return, kS, false, false, out, true, 0x1000, 0x1002);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kF, kS}));
  EXPECT_EQ(out.functions[kT].calls, 1u);
}

// A piece whose last instruction is __switch_to's `ret` (its PSB fell right
// after it): the next piece runs the next task, whose frames are not the
// ones the switch was called on. Before, the return popped __switch_to and
// the idle task's schedule_idle, do_idle and cpu_startup_entry replaced a
// polling task's frames one by one (__x64_sys_poll;cpu_startup_entry: 6 M
// instructions of a main job on a stack no kernel builds).
TEST(LandPieceStart, AReturnOutOfATaskSwitchAsAPieceEndsStartsTheNextOnAnUnknownBase) {
  constexpr uint32_t kA = 1, kSchedule = 2, kSwitchTo = 3, kNext = 4, kBase = 9;
  using P = PieceWalk::Pending;
  Profile out;
  PieceStacks next;
  next.first_fn = kNext;
  std::vector<uint32_t> prefix{kA, kSchedule, kSwitchTo};
  PieceEnd end{static_cast<uint8_t>(P::Return), false, 0, false, false, 0, true};
  land_piece_start(prefix, end, next, kBase, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kBase}));
  EXPECT_EQ(out.task_switches.at_piece_edge, 1u);
  // A plain return pops.
  prefix = {kA, kSchedule, kSwitchTo};
  end.switch_return = false;
  land_piece_start(prefix, end, next, kBase, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kSchedule}));
}

// A piece that ended in a retpoline thunk's frame (its inner call taken,
// its `ret` to come): the next piece's first function is the callee, and it
// takes the thunk's frame. Before, the `ret` popped the thunk and the callee
// replaced the thunk's caller: a main job lost __kernel_read under one
// finit_module (shmem_file_read_iter stood on kernel_read_file).
TEST(LandPieceStart, LeavingAThunkAcrossPiecesReplacesItsFrameAndCountsTheCall) {
  constexpr uint32_t kA = 1, kK = 2, kThunk = 3, kCallee = 4, kBase = 9;
  using P = PieceWalk::Pending;
  Profile out;
  PieceStacks next;
  next.first_fn = kCallee;
  next.first_at_entry = true;
  std::vector<uint32_t> prefix{kA, kK, kThunk};
  PieceEnd end{static_cast<uint8_t>(P::Return), false, 0, true, true, 0};
  land_piece_start(prefix, end, next, kBase, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kK, kThunk}));  // kCallee replaces the thunk: A>K>Callee
  EXPECT_EQ(out.functions[kCallee].calls, 1u);
  EXPECT_EQ((out.edges[{kK, kCallee}]), 1u);
  // Jumped to (a tail call through the thunk): counted from the jumper.
  prefix = {kA, kThunk};
  end = {static_cast<uint8_t>(P::Return), false, 0, true, false, kK};
  land_piece_start(prefix, end, next, kBase, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kThunk}));
  EXPECT_EQ((out.edges[{kK, kCallee}]), 2u);
  // The next piece still in the thunk (between its inner call and its ret):
  // the inner call into its own body is no call.
  next.first_fn = kThunk;
  next.first_at_entry = false;
  prefix = {kA, kK, kThunk};
  end = {static_cast<uint8_t>(P::Call), false, 0, true, true, 0};
  land_piece_start(prefix, end, next, kBase, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kK, kThunk}));
  EXPECT_EQ(out.functions[kThunk].calls, 0u);
  // An interrupt that struck in the thunk as the piece ended: its handler
  // stands on the thunk's frame, and is no call.
  constexpr uint32_t kEntry = 5;
  next.first_fn = kEntry;
  next.first_at_entry = true;
  next.first_event_entry = true;
  prefix = {kA, kK, kThunk};
  end = {static_cast<uint8_t>(P::Push), false, 0, true, true, 0};
  land_piece_start(prefix, end, next, kBase, out);
  EXPECT_EQ(prefix, (std::vector<uint32_t>{kA, kK, kThunk, kEntry}));
  EXPECT_EQ(out.functions[kEntry].calls, 0u);
}

}  // namespace
}  // namespace kt
