// Private: one thread's coverage walk (coverage_walk.cpp); see
// kthost/decode/coverage.h for what it answers.
//
// TextView is the text as a decoder thread's ImageCursor has it at a time:
// every version that began by then, laid over the earlier ones in
// VersionedImage::by_begin order. BlockCache holds basic blocks built from
// it; both move forward in time, and the cache is emptied when the view
// changes.
//
// CoverageWalk::walk(piece) is an explicit state machine over the piece's
// packets:
//   Header     inside PSB+: MODE, TSC, FUP (where execution stands), PSBEND
//   Off        tracing disabled: only TIP.PGE (or timing) may come
//   On         a TNT bit or TIP decides the branch the walk stops at; a FUP
//              walks to its address and moves to Async
//   Async      the FUP's TIP (the event's target) or TIP.PGD (tracing off)
//   Overflow   after an OVF: the FUP where tracing resumed, or TIP.PGE
// At the piece's last packet the walk keeps the blocks it passes (the tail)
// and cuts them where the next piece's FUP says execution stood, as the full
// decoder does. Anything else is a Fallback with a reason.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kthost/decode/coverage.h"

struct ZydisDecodedInstruction_;

namespace kt {

class TextView {
 public:
  explicit TextView(const VersionedImage& image) : image_(image) {}
  // The view as of `time`; returns true when it changed.
  bool seek(uint64_t time);
  // Bytes at addr up to the end of the version that holds it (0: no text).
  size_t read(uint64_t addr, const uint8_t*& out) const;
  // The time the next version begins (kTimeForever: none).
  uint64_t next_change() const;
  // How many versions are laid over: a block built at epoch e still holds
  // unless a version laid over since overlaps it.
  uint32_t epoch() const { return static_cast<uint32_t>(applied_); }
  bool changed_since(uint32_t epoch, uint64_t start, uint64_t end) const;

 private:
  struct Segment {
    uint64_t end;
    uint32_t version;
  };
  void apply(uint32_t version);
  const VersionedImage& image_;
  std::map<uint64_t, Segment> segments_;  // start -> [start, end) of one version
  size_t applied_ = 0;                     // versions of by_begin() laid over
  bool built_ = false;
};

// How a basic block ends.
enum class BlockEnd : uint8_t {
  Fallthrough,  // no branch: cut for size or at the end of a text version
  Cond,         // Jcc, LOOP, JrCXZ: a TNT bit
  DirectJump,   // JMP rel
  DirectCall,   // CALL rel (pushes its return address for return compression)
  Indirect,     // JMP through a register or memory: a TIP
  IndirectCall, // CALL through a register or memory: a TIP (pushes its return address)
  Return,       // near RET: a TIP, or a TNT bit when returns are compressed
  Far,          // IRET, SYSRET, SYSEXIT, far RET/JMP/CALL: a TIP or TIP.PGD
  Trap,         // INT n, INT3, UD2, SYSCALL, VMCALL...: only after a FUP at it
};

struct FastBlock {
  uint64_t ip = 0;      // 0: an empty slot
  uint64_t next = 0;    // the address after its last instruction
  uint64_t target = 0;  // Cond, DirectJump, DirectCall
  uint64_t execs = 0;   // times run to its end since it was built
  // The blocks it last went on to (fall through, target, indirect), each
  // checked by address and generation before use.
  FastBlock* succ[3] = {nullptr, nullptr, nullptr};
  uint32_t ninsn = 0;
  uint32_t fn = 0;           // function of ip
  uint32_t parts = 0;        // index+1 into the part lists when it spans functions (0: one function)
  uint32_t generation = 0;   // the view was rebuilt (back in time): every block is stale
  uint32_t epoch = 0;        // TextView::epoch when built or last found to hold
  uint32_t pending = 0;      // runs to its end in the piece being walked
  uint32_t piece_mark = 0;   // the last piece that used it (evicted last)
  uint32_t tail_mark = 0;    // the last piece whose tail holds it (never evicted then)
  BlockEnd end = BlockEnd::Fallthrough;
  bool leader_seen = false;
};

class CoverageWalk {
 public:
  CoverageWalk(const PtStreams& pt, const VersionedImage& image,
               const Symbolizer& symbols, unsigned cache_bits = 16);
  // Walks the piece: true, or false with the reason set (nothing of the
  // piece is then counted).
  bool walk(const Piece& piece, std::string& reason);
  // Adds what was counted into `out` (blocks, instructions per function).
  void merge_into(Coverage& out);

 private:
  struct TailBlock {
    FastBlock* block;
    uint32_t ninsn;  // block->ninsn
    bool leader;     // it began a basic block
  };
  struct PieceCounts {
    std::vector<FastBlock*> leaders;                            // leader_seen set in this piece
    std::vector<std::pair<uint32_t, uint64_t>> leader_places;   // ... as (function, address)
    std::vector<FastBlock*> touched;                            // pending > 0 (or its slot's new block)
    std::map<uint32_t, uint64_t> evicted;                       // instructions of parts and evicted blocks
    void clear() {
      leaders.clear();
      leader_places.clear();
      touched.clear();
      evicted.clear();
    }
  };
  bool walk_packets(const Piece& piece, std::string& reason);
  FastBlock* block_at(uint64_t ip, std::string& reason);
  bool build(FastBlock& b, uint64_t ip, std::string& reason);
  // The instruction at addr, its bytes read across versions if need be.
  bool decode_at(uint64_t addr, ZydisDecodedInstruction_& insn) const;
  // Instructions of `b` before `stop` (UINT32_MAX: not an instruction boundary in it).
  uint32_t insns_before(const FastBlock& b, uint64_t stop) const;
  // The walk runs `b` to its end / its first `ninsn` instructions.
  void enter(FastBlock* b);
  void enter_part(FastBlock* b, uint32_t ninsn);
  // From ip_ through blocks that need no trace, to the block whose branch
  // needs it (entered; ip_ is not moved past its branch).
  FastBlock* run_to_branch(std::string& reason);
  // Past a block whose end needs no trace (false: it needs some).
  bool follow_direct(FastBlock* b);
  // The block at ip_, through the link the walk came by when it holds.
  FastBlock* next_block(std::string& reason);
  // The walk goes on at ip, from block `from`'s successor `slot` (null: an event).
  void go(FastBlock* from, unsigned slot, uint64_t ip);
  // From ip_ to `stop` (an event's address), which must be on the way.
  bool walk_to(uint64_t stop, std::string& reason);
  bool take_tnt_bit(bool taken, std::string& reason);
  bool take_tip(uint64_t target, std::string& reason);
  bool leave_by_branch(std::string& reason);
  void push_return(uint64_t ip);
  void finish_tail(const Piece& piece);
  void flush_tail_whole();
  void drop_piece();
  void commit_piece();
  void flush_block(FastBlock& b);
  void add_insns(const FastBlock& b, uint64_t n, std::map<uint32_t, uint64_t>& to);

  const PtStreams& pt_;
  const Symbolizer& symbols_;
  TextView view_;
  std::vector<FastBlock> cache_;
  uint32_t generation_ = 1;
  uint64_t builds_ = 0;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> parts_;  // (function, instructions) per spanning block
  // Walk state of the piece in progress.
  PieceCounts piece_;
  uint32_t piece_serial_ = 0;
  uint64_t time_ = 0;
  uint64_t ip_ = 0;
  FastBlock* link_from_ = nullptr;
  unsigned link_slot_ = 0;
  // Return compression's stack, as the hardware (and libipt) keep it: 64 entries.
  static constexpr uint32_t kRetStackSize = 64;
  uint64_t ret_stack_[kRetStackSize] = {};
  uint32_t ret_top_ = 0, ret_depth_ = 0;
  bool leader_ = true;
  bool in_tail_ = false;
  std::vector<TailBlock> tail_;
  // Totals.
  std::map<uint32_t, uint64_t> fn_insns_;
  std::vector<std::pair<uint32_t, uint64_t>> leaders_;
};

}  // namespace kt
