// The plugin's ground truth for call stacks, independent of QEMU and of any
// PT decoding (truth=on): what the guest's stack pointer says.
//
// A call's store of its return address, a return's load of it and an IRET's
// load of its frame give the slot of each frame in guest memory. Frames live
// on stacks, told apart by their 16 KiB region (a kernel task stack or an IRQ
// stack; THREAD_SIZE and IRQ_STACK_SIZE). Per region:
//   a call at slot S pushes a frame (anything at or below S is dead: return
//     stack buffer stuffing leaves such frames);
//   a return from slot L pops every frame below L and the one at L; a
//     return from below the top frame pops it when it goes to that frame's
//     return address (error_entry moves its return address down), and
//     nothing when it goes elsewhere (a call not seen: an INT3 handler's
//     emulated call); one that empties the region without a match leaves
//     its base unknown;
//   an interrupt (a block no branch of the previous one leads to, or the
//     start of a known handler after an indirect branch) pushes an
//     interrupt frame; the IRET that pops it tells where it struck.
// Regions chain: a call onto an empty region at its page's top (the IRQ
// stack) stacks it on the current one; stepping onto a region that holds frames and is not below
// the current one is a task switch: that task's own frames come back.
// Entering the kernel from user space starts an empty stack.
//
// Each full stack is a node of a tree (parent, return address); the truth is
// counted per (node, block): how many times each block ran on each stack,
// and per (last instruction, next block, transition) for calls.
#ifndef KTHOST_PT_TRUTH_STACKS_H
#define KTHOST_PT_TRUTH_STACKS_H

#include <cstdint>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pt_encoder.h"

namespace ktpt {

class TruthStacks {
 public:
  static constexpr uint32_t kEmpty = 0;        // node: the empty stack (entered from user space)
  static constexpr uint32_t kBaseUnknown = 1;  // node: a stack whose frames below were never seen
  // Bounded memory: past this many stack nodes (about 200 MB with the maps)
  // the truth stops counting and says so in its file ("incomplete").
  static constexpr size_t kMaxNodes = size_t{1} << 23;

  enum class Transition : uint8_t { Call, Jump, Return };
  struct Node {
    uint32_t parent;
    uint64_t ret;      // return address; for an interrupt, where it struck (0 until its IRET)
    bool interrupt;
  };

  explicit TruthStacks(size_t max_nodes = kMaxNodes);

  // User code ran: the next kernel block starts an empty stack.
  void on_user();
  // A kernel block is about to run; `block_id` names it in the dump.
  void on_kernel_block(const Block& b, uint32_t block_id);
  // One more iteration of the REP that the last block ended with (see
  // VcpuEncoder::is_rep_repeat): it moves no frame and counts nothing, and
  // take_rep_repeat takes it as on_kernel_block would.
  bool is_rep_repeat(const Block& b) const {
    return !from_user_ && prev_ && prev_->end == EndKind::Rep && prev_->last == b.start;
  }
  void take_rep_repeat(const Block& b) {
    if (full_) return;
    prev_ = &b;
    prev_called_ = false;
  }
  // The last instruction of the current block stored its return address at
  // `slot` (a call); loaded one from `slot` (a return); an IRET loaded its
  // frame's RIP from `slot`.
  void on_call(uint64_t slot, uint64_t return_address);
  void on_return(uint64_t slot);
  void on_iret(uint64_t slot);

  // The truth so far as text (see write), then forgotten: the next trace
  // starts fresh. Block starts and instruction offsets come from `blocks`.
  void write(std::FILE* out, unsigned cpu, const std::vector<const Block*>& blocks);
  void reset();

  // For tests.
  uint32_t top() const;
  const Node& node(uint32_t id) const { return nodes_[id]; }
  uint64_t count(uint32_t node, uint32_t block_id) const;
  uint64_t transitions(uint64_t from_last, uint64_t to, Transition t) const;
  bool full() const { return full_; }

 private:
  struct Frame {
    uint64_t slot;  // 0 for an interrupt frame (its slot is not seen)
    uint32_t node;
  };
  struct Region {
    std::vector<Frame> frames;
    uint32_t base = kEmpty;  // the node under its first frame
    uint64_t below = 0;      // the region it stacks on (0: none)
  };
  static uint64_t region_of(uint64_t slot) { return slot >> 14; }
  static constexpr uint64_t kStackTopSlots = 0xf40;  // page offsets of a stack's first slots (step_onto)
  Region& step_onto(uint64_t slot, bool by_call);
  uint32_t intern(uint32_t parent, uint64_t ret);
  bool is_expected(const Block& prev, uint64_t start) const;
  void resolve_moved_return(const Block& prev, uint64_t target);

  std::vector<Node> nodes_;
  std::unordered_multimap<uint64_t, uint32_t> children_;  // hash of (parent, ret) -> call nodes
  std::unordered_map<uint64_t, Region> regions_;     // key 0: a stack not yet placed
  uint64_t current_ = 0;
  std::unordered_map<uint64_t, uint64_t> counts_;    // node << 32 | block id -> executions
  struct Edge {
    uint64_t from, to;
    Transition t;
    bool operator==(const Edge& o) const { return from == o.from && to == o.to && t == o.t; }
  };
  struct EdgeHash {
    size_t operator()(const Edge& e) const { return std::hash<uint64_t>()(e.from * 31 + e.to * 7 + static_cast<uint64_t>(e.t)); }
  };
  std::unordered_map<Edge, uint64_t, EdgeHash> edges_;
  std::unordered_set<uint64_t> handlers_;  // known handler entries
  const Block* prev_ = nullptr;            // the last kernel block (nullptr after user code)
  bool from_user_ = true;
  bool prev_called_ = false;               // the last block's last instruction was a call
  uint32_t resume_ = 0;                    // an interrupt node whose IRET just ran: next block is where it struck
  // The branch an interrupt struck right after (its destination had not run
  // yet), by interrupt node: counted as a transition to where it struck.
  struct Struck {
    uint64_t from;
    Transition t;
  };
  std::unordered_map<uint32_t, Struck> struck_after_;
  // A return from below the top frame's slot, in this region, waits for its
  // target (resolve_moved_return); kNone: none waits.
  static constexpr uint64_t kNone = ~uint64_t{0};
  uint64_t moved_return_ = kNone;
  uint64_t unseen_call_returns_ = 0;       // returns of calls not seen (the top frame stayed)
  size_t max_nodes_;
  bool full_ = false;                      // max_nodes_ reached: nothing more is counted
};

}  // namespace ktpt

#endif
