// Private: the stacks of all pieces, put together (stack_stitch.cpp).
//
// Each piece's stacks are rooted at markers (piece_walk.h): segment 0 at the
// stack the piece began with, segment k at its k-th task switch. The
// stitcher goes through every CPU's pieces in stream order, and through the
// CPUs by time, as actions:
//   begin piece   segment 0 is the stack the CPU's previous piece ended
//                 with, moved by that piece's last call or return;
//   task switch   the stack of the task that left is kept under its tid;
//                 the next segment is the stack the next task had when it
//                 last left a CPU, else [base unknown]. Which tasks these
//                 are comes from the guest's log, matched to the switches
//                 in PT (match_task_switches);
//   logged switch one the decode did not see (an error or overflow hid it):
//                 the stacks kept for both of its tasks are forgotten, as
//                 they ran on unseen;
//   end piece     every count is put on its full stack;
//   loss          a sideband loss report (TaskSwitchLog::losses): records
//                 of the CPU were dropped before it, since its previous
//                 loss. The task a dropped record switched to ran unnamed,
//                 and the record after a dropped one names the wrong task
//                 as leaving: the matched switches from the previous loss
//                 up to the first after this one keep and resume no stack,
//                 and at the loss every kept stack is forgotten.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kthost/decode/decoder.h"
#include "piece_decoder.h"

namespace kt {

struct SwitchMatch {
  std::vector<int64_t> record;  // per switch seen, in order: its index in the log, or -1
  int64_t offset = 0;           // added to the log's times
};
// Matches the task switches seen in one CPU's windows (SwitchSpan, in
// stream order) to that CPU's log
// ((PT time, tid), in order). The log's times are off by a constant (the
// clock alignment, and the record coming a little before its switch): the
// offset that makes the most pieces hold exactly as many logged switches as
// the decode saw in them is taken. A piece whose count differs, or that had
// an error, gets none: its switches stay unmatched, never guessed.
SwitchMatch match_task_switches(const std::vector<SwitchSpan>& spans,
                                const std::vector<std::pair<uint64_t, uint32_t>>& log);

// The previous piece of a CPU ended on a call, return or interrupt (`end`)
// whose destination is where the next piece `next` first ran (its first_fn,
// first_at_entry, first_event_entry, first_ip): applies it to `prefix`, as
// PieceWalk::move would have, and counts the call in `out`. The next
// piece's first function replaces the top of its prefix (its marker), so
// where the destination stands on top of the frame returned to, the top is
// doubled for it to replace:
//   - an event entry at its entry that nothing of the piece pushed, after
//     a return or straight-line code (the PSB fell between the interrupt
//     and its handler, or an interrupt struck right after the previous
//     piece's IRET): the handler stands on the interrupted function
//     instead of taking its place (and its IRET then popping the frame
//     below);
//   - an IRET into a plain function's entry: a call made by proxy
//     (text_poke_bp's INT3 handler emulating a CALL), counted as one.
// A return to within 2 bytes after its own instruction (sync_core()'s IRET)
// returns from no call and pops nothing. A piece that ended in a thunk
// (retpoline) and a next one that begins in another function: that function
// takes the thunk's frame, and the call that opened it (the thunk's `ret`
// goes to the callee; before, it popped the thunk's caller).
void land_piece_start(std::vector<uint32_t>& prefix, const PieceEnd& end, const PieceStacks& next,
                      uint32_t base_unknown, Profile& out);

// Puts every piece's stack counts into out.stacks, and out.task_switches.
void stitch_stacks(std::vector<PieceStacks>& pieces, const std::vector<std::unique_ptr<PieceDecoder>>& decoders,
                   uint32_t base_unknown, const TaskSwitchLog* log, Profile& out);

}  // namespace kt
