// Private: the call tree of one decoding thread, and the explicit state
// machine that walks one PT piece's blocks through it (piece_walk.cpp).
//
// PieceDecoder::run feeds PieceWalk with what libipt reports, in order:
//   on_time       a timing packet: the time only moves forward; a later time
//                 ends the uncertainty an overflow left.
//   on_overflow   OVF: the stack is unknown (reset), the time is uncertain.
//   on_tracing_changed  PGE/PGD: the stack restarts empty (reset).
//   on_interrupt  an asynchronous branch: what the last instruction began
//                 (a call, a return) lands where the interrupt struck, and
//                 the next block is pushed on top of that.
//   on_block      a run of instructions in one function: the stack moves by
//                 what the previous block's last instruction was (call,
//                 return, jump), and the counts grow.
//   on_error      a decode error: the stack is unknown (reset); missing text
//                 while the time is uncertain is the overflow's loss.
// Two kinds of function move the stack their own way (FunctionKind):
//   a retpoline thunk (__x86_indirect_thunk_*) is seen through: the frame a
//   call into it opened, and the call, belong to the function it jumps or
//   returns to;
//   __switch_to_asm (and __switch_to, which it jumps to) switches tasks: the
//   return that leaves its frame lands on the next task's stack. The walk
//   records the leaving task's stack (PieceScratch::switch_out) and starts a
//   new segment of the piece, rooted at a marker for that switch: the
//   stitcher (decoder.cpp) puts under it the stack the next task had when it
//   last left a CPU, known from the guest's TASK_SWITCHES sideband, or
//   [base unknown]; never the old task's frames.
// After an overflow or an error, too, the stack restarts on [base unknown];
// after tracing is enabled it restarts empty (the kernel was entered).
// Each transition is a method with a unit test (piece_walk_test.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "kthost/decode/decoder.h"

namespace kt {

// kClsFarReturn: IRET, RETF, SYSRET, SYSEXIT. A return like kClsReturn,
// but one that can land where no call was made (see PieceWalk::move).
enum InsnClass : uint8_t { kClsOther = 0, kClsCall, kClsReturn, kClsJump, kClsCond, kClsFarReturn };

// How a function moves the call stack (see above).
// kFnEventEntry: an entry the CPU jumps to on an event (is_event_entry).
enum FunctionKind : uint8_t { kFnPlain = 0, kFnThunk, kFnTaskSwitch, kFnEventEntry };
// The kind of a function by its name.
FunctionKind function_kind_of(const std::string& name);
// Whether a function is an entry the CPU jumps to on an event (an interrupt,
// an exception, a system call): what a stack has on top of what was struck.
bool is_event_entry(const std::string& name);

// A stack node whose fn has this bit is a marker: "the stack segment S of
// the piece began with, less P frames popped below it", with S in bits
// 16..30 and P in bits 0..15. Segment 0 is the piece's start; segment k >= 1
// begins at its k-th task switch.
inline constexpr uint32_t kStackMarker = 0x80000000u;
inline constexpr uint32_t kMaxSwitchSegments = 0x7fffu;
inline constexpr uint32_t stack_marker(uint32_t segment, uint32_t popped) {
  return kStackMarker | (segment << 16) | (popped < 0xffffu ? popped : 0xffffu);
}
inline constexpr uint32_t marker_segment(uint32_t marker) { return (marker >> 16) & kMaxSwitchSegments; }
inline constexpr uint32_t marker_popped(uint32_t marker) { return marker & 0xffffu; }
// The class of the x86-64 instruction at `p` (prefixes skipped).
uint8_t classify_x86(const uint8_t* p, size_t n);
// The length of the x86-64 instruction at p (Zydis), 0 when it does not decode.
size_t x86_insn_length(const uint8_t* p, size_t n);
DecodeErrorKind classify_pt_error(int code);

// A stretch of one CPU's trace (a piece, or its part between two timing
// packets) and the task switches the decode saw in it.
struct SwitchSpan {
  uint64_t time = 0, end_time = 0;  // end_time 0: none (the CPU's last piece)
  uint32_t count = 0;
  bool complete = true;  // no error or overflow: count is every switch in it
};

// How a piece ended: what its last instruction began
// (PieceWalk::Pending), whether that was an IRET's return, and the address
// of that instruction.
struct PieceEnd {
  uint8_t pending = 0;
  bool far_return = false;
  uint64_t last_ip = 0;
  bool in_thunk = false;      // its top frame is a thunk's (PieceWalk::end_state) ...
  bool thunk_called = false;  // ... which a call opened
  uint32_t thunk_from = 0;    // ... else the function that jumped to it
  // Its last instruction is the return out of a task switch (__switch_to's
  // `ret`): the next piece begins on the next task's stack.
  bool switch_return = false;
};

// What one piece added; committed into the thread's totals only if kept.
struct PieceScratch {
  uint64_t insns = 0, blocks = 0;
  std::vector<uint64_t> fn_insns, fn_calls;  // dense by function id
  std::vector<uint32_t> fn_touched;
  std::vector<uint64_t> node_insns;          // dense by stack node
  std::vector<uint32_t> node_touched;
  std::unordered_map<uint64_t, uint64_t> edges;
  std::vector<std::pair<uint32_t, uint64_t>> new_blocks;
  std::vector<DecodeErrorRecord> errors;
  uint64_t error_total = 0;  // errors other than overflow
  uint64_t skipped_bytes = 0;  // PT bytes not decoded after an error (the rest of the piece)
  uint64_t loop_insns_dropped = 0;  // instructions of a loop no packet confirmed, not counted
  uint64_t t_end = 0;        // PT time at the end of the piece
  uint32_t final_node = 0;   // the stack at the end of the piece
  uint32_t first_fn = UINT32_MAX;  // where the piece's stack first landed on the one it began with
  bool first_at_entry = false;     // ... at that function's entry
  bool first_event_entry = false;  // ... which is an event entry (kFnEventEntry)
  uint64_t first_ip = 0;           // ... the address it landed at
  PieceEnd end;                    // how the piece ended (PieceWalk::end_state)
  // Each task switch the piece saw, in order: the stack node of the task
  // that left (its frames below the switch's own).
  std::vector<uint32_t> switch_out;
  // Each time the piece's time moved on (a timing packet), with how many
  // switches came before it, and whether an error or overflow since the
  // last mark may have hidden some: the windows task switches are matched
  // to the guest's log in.
  struct TimeMark {
    uint64_t time;
    uint32_t switches;
    bool gap;
  };
  std::vector<TimeMark> time_marks;
  bool gap_since_mark = false;
  std::map<DecodeErrorKind, uint64_t> error_counts;
  void reset();
};

// Stack nodes: node 0 is the empty stack; a node is (parent, function). A
// root whose fn carries kStackMarker stands for the stack the piece began
// with, less (fn & ~kStackMarker) frames popped below it.
class CallTree {
 public:
  struct Node {
    uint32_t parent, fn, depth, marker;
  };
  CallTree() { nodes_.push_back({0, UINT32_MAX, 0, 0}); }
  // The node for `fn` called from `parent` (bounded depth: past 256 the top is replaced).
  uint32_t child(uint32_t parent, uint32_t fn);
  const Node& node(uint32_t n) const { return nodes_[n]; }
  size_t size() const { return nodes_.size(); }
  // The empty stack, or a piece's base marker.
  bool is_root(uint32_t n) const { return n == 0 || (nodes_[n].fn != UINT32_MAX && (nodes_[n].fn & kStackMarker)); }
  // Root-to-leaf functions of a node; a marker, if any, comes first.
  void path_of(uint32_t node, std::vector<uint32_t>& path) const;

 private:
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> children_;
  // The children looked up last, direct-mapped in front of children_: a
  // decode asks for the same few thousand edges hundreds of millions of times.
  struct Recent {
    uint64_t key = UINT64_MAX;  // (parent << 32) | fn; no node has parent UINT32_MAX
    uint32_t node = 0;
  };
  static constexpr size_t kRecentSlots = 4096;  // power of two
  std::vector<Recent> recent_ = std::vector<Recent>(kRecentSlots);
};

class PieceWalk {
 public:
  // What the previous block's last instruction makes of the next block.
  // Jump: a jump, which counts as a call when it enters another function at
  // its entry (a tail call); None: straight-line code or a conditional branch.
  enum class Pending { None, Call, Return, Push, Jump };

  struct Block {
    uint32_t fn = 0;        // Symbolizer function id (kUnknown: no symbol)
    uint32_t ninsn = 0;
    uint8_t cls = kClsOther;  // the class of its last instruction
    bool at_entry = false;  // it starts at its function's entry
    FunctionKind kind = kFnPlain;
    // It starts within 2 bytes after the previous block's last instruction:
    // a return that lands there returns from nothing (sync_core()'s IRET to
    // the next instruction; no call can have pushed that address).
    bool after_last = false;
  };
  // Where an interrupt struck: the function of the FUP's address.
  struct Place {
    uint32_t fn = 0;
    bool at_entry = false;
    FunctionKind kind = kFnPlain;
    bool after_last = false;  // as Block::after_last
  };

  // base_unknown: the function id of the [base unknown] frame.
  PieceWalk(CallTree& tree, PieceScratch& scratch, uint64_t start_time, uint32_t base_unknown)
      : tree_(tree), s_(scratch), now_(start_time), base_unknown_(base_unknown) {}

  void on_time(uint64_t time);
  void on_overflow();
  void on_tracing_changed();
  void on_interrupt(const Place& from);
  void on_block(const Block& block);
  // Returns the kind to count: NoText becomes Overflow while the time is uncertain.
  DecodeErrorKind on_error(DecodeErrorKind kind);

  uint64_t now() const { return now_; }
  // Whether the next block begins a basic block (after a transfer or an event): for coverage.
  bool leader() const { return leader_; }
  bool time_uncertain() const { return time_uncertain_; }
  uint32_t current() const { return cur_; }
  Pending pending() const { return pending_; }
  uint32_t underflows() const { return underflows_; }
  // The stack at the end of the piece; UINT32_MAX when it never had a block
  // and the stack it began with is unchanged.
  uint32_t final_node() const { return cur_ == 0 && !reset_ ? UINT32_MAX : cur_; }
  // The function the piece first landed in on the stack it began with
  // (UINT32_MAX: none, or the stack restarted first). The previous piece's
  // last call or return lands there.
  uint32_t first_fn() const { return first_fn_; }
  bool landed() const { return landed_; }
  // How the piece ends, its last instruction at `last_ip`. A thunk's frame
  // on top (see move): the next function it goes to takes the frame, and
  // the call that opened it.
  PieceEnd end_state(uint64_t last_ip) const {
    const bool in_thunk = thunk_node_ != 0 && cur_ == thunk_node_;
    const bool switch_return = pending_ == Pending::Return && switch_depth_ != 0 && cur_ != 0 &&
                               tree_.node(cur_).depth <= switch_depth_;
    return {static_cast<uint8_t>(pending_), far_return_, last_ip, in_thunk, thunk_called_, thunk_from_, switch_return};
  }
  bool first_at_entry() const { return first_at_entry_; }
  bool first_event_entry() const { return first_event_entry_; }

 private:
  uint32_t root_for(uint32_t fn);
  void reset_stack(bool base_known);
  void count(uint32_t fn, uint32_t ninsn);
  void count_call(uint32_t caller, uint32_t fn);
  // The function of a frame; kUnknown for a root, a marker or [base unknown].
  uint32_t function_of(uint32_t node) const;
  // Moves the stack to function `at` by the pending transition.
  void move(const Place& at);
  bool is_unknown_base(uint32_t node) const { return node != 0 && tree_.node(node).depth == 1 && tree_.node(node).fn == base_unknown_; }

  CallTree& tree_;
  PieceScratch& s_;
  uint64_t now_;
  uint32_t base_unknown_;
  uint32_t cur_ = 0;  // 0: no block yet, or the stack was reset
  Pending pending_ = Pending::None;
  bool far_return_ = false;  // pending_ is Return, by an IRET (kClsFarReturn)
  // Until the trace is enabled in this piece, its stack continues the
  // previous piece's: roots hang under a marker counting the frames popped.
  uint32_t underflows_ = 0;
  bool reset_ = false;  // the stack restarted in this piece
  bool base_known_ = true;  // ... empty (true) or on [base unknown]
  uint32_t first_fn_ = UINT32_MAX;
  bool first_at_entry_ = false;
  bool first_event_entry_ = false;
  bool landed_ = false;  // first_fn_ is known
  uint32_t thunk_node_ = 0;  // the frame a thunk runs in (0: none) ...
  bool thunk_called_ = false;  // ... opened by a call (not a jump)
  uint32_t thunk_from_ = 0;    // ... else the function that jumped to it
  // Thunks an interrupt struck in, innermost last: the handler's own thunks
  // replace thunk_node_, and the IRET back into the thunk's frame restores
  // it (the last kMaxInterruptedThunks; an older one is forgotten).
  struct ThunkState {
    uint32_t node = 0, from = 0;
    bool called = false;
  };
  static constexpr size_t kMaxInterruptedThunks = 4;
  std::array<ThunkState, kMaxInterruptedThunks> interrupted_thunks_{};
  size_t n_interrupted_thunks_ = 0;
  uint32_t switch_depth_ = 0;  // in __switch_to_asm's frame at this depth (0: not switching)
  uint32_t segment_ = 0;       // roots hang under this segment's marker (see kStackMarker)
  bool any_block_ = false;
  bool leader_ = true;
  // After an overflow the time stays where it was until the next timing
  // packet, though the packets that follow may have run much later.
  bool time_uncertain_ = false;
};

}  // namespace kt
