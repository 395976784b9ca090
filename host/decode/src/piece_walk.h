// Private: the call tree of one decoding thread, and the explicit state
// machine that walks one PT piece's blocks through it (piece_walk.cpp).
//
// PieceDecoder::run feeds PieceWalk with what libipt reports, in order:
//   on_time       a timing packet: the time only moves forward; a later time
//                 ends the uncertainty an overflow left.
//   on_overflow   OVF: the stack is unknown (reset), the time is uncertain.
//   on_tracing_changed  PGE/PGD: the stack restarts empty (reset).
//   on_interrupt  an asynchronous branch: the next block is pushed on top.
//   on_block      a run of instructions in one function: the stack moves by
//                 what the previous block's last instruction was (call,
//                 return, jump), and the counts grow.
//   on_error      a decode error: the stack is unknown (reset); missing text
//                 while the time is uncertain is the overflow's loss.
// Each transition is a method with a unit test (piece_walk_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "kthost/decode/decoder.h"

namespace kt {

enum InsnClass : uint8_t { kClsOther = 0, kClsCall, kClsReturn, kClsJump, kClsCond };

// A stack node whose fn has this bit is a marker: "the stack the piece began
// with, less (fn & ~kStackMarker) frames popped below it".
inline constexpr uint32_t kStackMarker = 0x80000000u;
// The class of the x86-64 instruction at `p` (prefixes skipped).
uint8_t classify_x86(const uint8_t* p, size_t n);
// The length of the x86-64 instruction at p (Zydis), 0 when it does not decode.
size_t x86_insn_length(const uint8_t* p, size_t n);
DecodeErrorKind classify_pt_error(int code);

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
  uint64_t t_end = 0;        // PT time at the end of the piece
  uint32_t final_node = 0;   // the stack at the end of the piece
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
};

class PieceWalk {
 public:
  // What the previous block's last instruction makes of the next block.
  enum class Pending { None, Call, Return, Push };

  struct Block {
    uint32_t fn = 0;        // Symbolizer function id (kUnknown: no symbol)
    uint32_t ninsn = 0;
    uint8_t cls = kClsOther;  // the class of its last instruction
    bool at_entry = false;  // it starts at its function's entry
  };

  PieceWalk(CallTree& tree, PieceScratch& scratch, uint64_t start_time)
      : tree_(tree), s_(scratch), now_(start_time) {}

  void on_time(uint64_t time);
  void on_overflow();
  void on_tracing_changed();
  void on_interrupt();
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

 private:
  uint32_t root_for(uint32_t fn);
  void reset_stack();
  void count(uint32_t fn, uint32_t ninsn);

  CallTree& tree_;
  PieceScratch& s_;
  uint64_t now_;
  uint32_t cur_ = 0;  // 0: no block yet, or the stack was reset
  Pending pending_ = Pending::None;
  // Until the trace is enabled in this piece, its stack continues the
  // previous piece's: roots hang under a marker counting the frames popped.
  uint32_t underflows_ = 0;
  bool reset_ = false;  // the stack restarted empty in this piece
  bool leader_ = true;
  // After an overflow the time stays where it was until the next timing
  // packet, though the packets that follow may have run much later.
  bool time_uncertain_ = false;
};

}  // namespace kt
