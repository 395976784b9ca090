// The per-vCPU software Intel PT encoder, independent of QEMU.
//
// The plugin (plugin.cpp) feeds it the blocks a vCPU executes, in order; unit
// tests feed it hand-made sequences.  It writes real PT packets (libipt's
// encoder) for kernel-only tracing with return compression off:
//   TNT for conditional branches, TIP for indirect branches / returns / IRET,
//   FUP+TIP for interrupts, exceptions and software interrupts,
//   TIP.PGE entering the kernel from user mode, TIP.PGD leaving it,
//   PSB+ (PSB, MODE.Exec 64-bit, TSC, FUP, PSBEND) every psb_interval bytes
//   (while an interrupt frame is open, a TSC alone: see Deferral),
//   a TSC at the first kernel block after the vCPU was idle (note_idle),
//   OVF when the encoder cannot tell what happened (see "Deferral").
//
// Deferral.  QEMU delivers interrupts between blocks and faults inside them,
// and the plugin sees neither: it only sees that the next block is not where
// the previous one led.  Where the previous block would have gone (the TNT
// bit or TIP of its last branch) and whether it completed (a fault leaves it
// part-way) is only learnt when the handler returns: the IRET's target is the
// interrupted IP.  So from an unexplained discontinuity on, packets go into a
// per-vCPU side buffer ("frame"), frames nest like the handlers, and the
// matching IRET resolves the frame: the missing packets are inserted in front
// of the handler's.  A handler that sleeps (a page fault waiting for a page)
// lets other contexts run and open frames of their own, so an IRET may also
// resolve a frame below the innermost one when only that frame's block fits.  A frame that cannot be resolved (its IRET goes elsewhere,
// the side buffer fills up, tracing stops) becomes OVF + PSB+ (with the
// handler's FUP): the tail of the interrupted block is lost, and counted.
// A return to user mode whose user code faults before any of its blocks
// ran (its page not present yet) shows as a kernel block that returns to
// user (SYSRET, IRET) followed at once by the fault handler, and the
// handler's IRET then goes to user mode. After a SYSRET that is written as
// it happened, TIP.PGD then TIP.PGE; after an IRET, which may also return
// to the kernel, the handler opens a chained frame, and an IRET to user
// mode while such a frame is open ends it the same way (unseen_user).
// The PSB+'s TSC (the clock when the frame opened) gives a decoder the time
// again at once, so that it never picks text by the stale time an overflow
// leaves, and a place to start decoding anew.
#ifndef KTHOST_PT_ENCODER_H
#define KTHOST_PT_ENCODER_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

struct pt_encoder;
struct pt_packet;

namespace ktpt {

// How a block ends, from its last instruction (classify.h).
enum class EndKind : uint8_t {
  Fallthrough,  // no control transfer (block cut for size, page end, or after a mode change)
  Cond,         // Jcc, LOOPcc, JrCXZ: target or next
  DirectJmp,    // JMP rel: target
  DirectCall,   // CALL rel: target
  Indirect,     // JMP/CALL through a register or memory, far JMP/CALL
  Return,       // RET, far RET
  Iret,         // IRET*: kernel or user target
  ToUser,       // SYSRET, SYSEXIT: always to user mode
  SoftInt,      // INT n, INT3, INT1, INTO, UD0/1/2, SYSCALL/SYSENTER in kernel: traps at the instruction
  Halt,         // HLT, MWAIT: resumes at next after an interrupt
  Rep,          // a REP-prefixed string instruction: re-executes itself, then next
};

bool is_kernel_address(uint64_t address);

// One translated block, built at translation time and shared by every execution.
struct Block {
  uint64_t start = 0;
  uint64_t last = 0;    // address of the last instruction
  uint64_t next = 0;    // address after the last instruction
  uint64_t target = 0;  // branch target for Cond, DirectJmp, DirectCall
  EndKind end = EndKind::Fallthrough;
  bool kernel = false;
  uint32_t n_insns = 0;
  uint32_t id = 0;                     // the plugin's number for it (truth=on)
  std::vector<uint16_t> insn_offsets;  // offset of each instruction from start

  bool contains_insn(uint64_t address) const;
};

struct EncoderOptions {
  uint32_t psb_interval = 4096;       // bytes of output between PSB+ headers
  size_t deferred_limit = 32u << 20;  // side-buffer bytes before frames are given up (OVF)
  size_t max_frames = 64;             // nesting depth before frames are given up (OVF)
};

struct EncoderStats {
  uint64_t kernel_blocks = 0;
  uint64_t rep_repeats = 0;           // of them, REP iterations after the first (take_rep_repeat)
  uint64_t kernel_insns = 0;          // instructions of executed kernel blocks (REP once, faults counted whole)
  uint64_t events = 0;                // discontinuities encoded as FUP+TIP
  uint64_t resolved_async = 0;        // deferred frames resolved as "after the block"
  uint64_t resolved_fault = 0;        // deferred frames resolved as "inside the block"
  uint64_t unseen_user = 0;           // returns to user mode whose user code faulted before it ran
  uint64_t overflows = 0;             // OVF packets written
  uint64_t psbs = 0;
  uint64_t idle_tscs = 0;             // TSCs written after an idle spell (note_idle)
  uint64_t enables = 0;               // TIP.PGE
  uint64_t disables = 0;              // TIP.PGD
  uint64_t stops_at_block = 0;        // traces ended at the first instruction of the block that would run next (stop_before)
  uint64_t encode_errors = 0;         // packets libipt's encoder rejected (none expected)
  uint64_t orphan_irets = 0;          // IRETs that fitted no frame of this vCPU (posted to the ResumeBoard if another's fits)
  uint64_t resolved_elsewhere = 0;    // frames resolved by another vCPU's IRET (a handler that migrated)
  uint64_t entries_learned = 0;       // distinct event entry points learnt
  uint64_t entries_refused = 0;       // entry points not learnt: the set was full
};

using ClockFn = uint64_t (*)(void* context);

// IRET targets that fitted no frame of the vCPU that ran the IRET, shared by
// every vCPU's encoder. A handler that sleeps (a page fault waiting on a
// lock or a page) may wake on another vCPU and return there: its frame,
// open on the vCPU it struck, would otherwise wait for an IRET that never
// comes there, and become an overflow when tracing stops. The vCPU whose
// frame fits a posted target exactly (the interrupted block holds it, or
// is its only successor) takes it and resolves the frame with it.
//
// Only an IRET that some other vCPU's open frame fits is posted: each
// encoder lists its open frames here (wait, stop_waiting). Most IRETs that
// fit no frame of their own vCPU return from no event (sync_core()'s); posted,
// thousands of them pushed a real post off the board while the vCPU that
// held its frame sat idle, and that frame became an overflow.
class ResumeBoard {
 public:
  static constexpr size_t kMaxPosts = 256;  // the oldest is dropped past this (counted)
  // `owner`'s frame, opened at `time` where it interrupted `interrupted`,
  // waits for its IRET; until stop_waiting (the block outlives it).
  void wait(const void* owner, const Block* interrupted, uint64_t time);
  void stop_waiting(const void* owner, const Block* interrupted, uint64_t time);
  void forget(const void* owner);  // all of owner's frames
  // Posts `resume` (an IRET of `owner` at `time`) if a frame another owner
  // waits with fits it exactly; false when none does (counted: unfit()).
  bool post(const void* owner, uint64_t resume, uint64_t time);
  // The oldest post at or after `since` for which `fits(resume)` holds is
  // taken off the board; false if there is none.
  template <typename Fits>
  bool take(uint64_t since, Fits fits, uint64_t* resume) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = posts_.begin(); it != posts_.end(); ++it) {
      if (it->time < since || !fits(it->resume)) continue;
      *resume = it->resume;
      posts_.erase(it);
      count_.store(posts_.size(), std::memory_order_relaxed);
      return true;
    }
    return false;
  }
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }
  // Bumped by each post: an encoder looks again only when it moved.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t unfit() const { return unfit_.load(std::memory_order_relaxed); }

 private:
  struct Post {
    uint64_t resume, time;
  };
  std::mutex mutex_;
  std::deque<Post> posts_;
  std::atomic<size_t> count_{0};
  struct Waiting {
    const void* owner;
    const Block* interrupted;
    uint64_t time;
  };
  std::vector<Waiting> waiting_;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> unfit_{0};
  std::atomic<uint64_t> generation_{0};
};

class VcpuEncoder {
 public:
  VcpuEncoder(const EncoderOptions& options, ClockFn clock, void* clock_context);
  ~VcpuEncoder();
  VcpuEncoder(const VcpuEncoder&) = delete;
  VcpuEncoder& operator=(const VcpuEncoder&) = delete;

  // The vCPU is about to execute `block` (kernel or user).  The block object
  // must outlive the next call.
  void on_block(const Block& block);

  // A REP string instruction's own block running once more, right after
  // the block it ends (QEMU runs each iteration as a block): PT writes
  // nothing for it. take_rep_repeat takes such a block as run, as on_block
  // would. Inline: the plugin calls them for every iteration of every REP
  // (most of the blocks a guest runs).
  bool is_rep_repeat(const Block& block) const {
    return in_kernel_ && prev_->end == EndKind::Rep && prev_->last == block.start;
  }
  void take_rep_repeat(const Block& block) {
    ++stats_.kernel_blocks;
    ++stats_.rep_repeats;
    prev_ = &block;
  }

  // Share IRETs with the other vCPUs' encoders (see ResumeBoard); null: none.
  void set_resume_board(ResumeBoard* board) { board_ = board; }

  // The vCPU goes idle (it halted and its thread sleeps). Its next kernel
  // block is followed by a TSC: an idle vCPU writes no packets, so without
  // one a decoder would take everything after the wakeup to have run at the
  // time of the last PSB or TSC before it, and pick the text of that time
  // (a text poke made on another CPU meanwhile would be missed).
  void note_idle() { time_due_ = true; }

  // Tracing stops here: pending TNT bits are written, open frames become OVF.
  // Calling on_block again later re-enables with TIP.PGE.
  void stop();

  // Tracing stops right before `next` runs (the plugin found the trigger off
  // at its start). Where the last block's end leads to `next` with no event
  // (a conditional branch, whose outcome `next` tells; a direct jump or call;
  // no branch), the stream says so and ends at next's first instruction with
  // FUP + TIP.PGD: a decoder stops exactly where tracing did. stop() alone
  // leaves the last conditional branch with no TNT bit before a TIP.PGD with
  // no IP (perf's decoder: "Trace doesn't match instruction"), and after a
  // block with no branch lets a decoder walk on into code that did not run
  // traced. Anything else (an event, an open frame, user mode) is stop().
  void stop_before(const Block& next);

  // Finished packets.  The caller writes them out and clears the vector.
  std::vector<uint8_t>& output() { return out_; }
  const EncoderStats& stats() const { return stats_; }
  size_t open_frames() const { return frames_.size(); }
  bool in_kernel() const { return in_kernel_; }

 private:
  struct Frame {
    const Block* interrupted;  // the block the event hit (during or after it)
    uint64_t handler;          // first block of the handler
    size_t offset;             // where the handler's packets start in deferred_
    bool chained;              // interrupted is the IRET that ends the frame below
    uint64_t time;             // the clock when it opened: an OVF in its place carries it
  };

  std::vector<uint8_t>& sink() { return frames_.empty() ? out_ : deferred_; }
  void emit(const ::pt_packet& packet, std::vector<uint8_t>& to);
  void emit_ip(int type, uint64_t ip, std::vector<uint8_t>& to, bool compress);
  void emit_tip(uint64_t ip);
  void emit_pgd();
  void write_pgd(std::vector<uint8_t>& to);  // TIP.PGD, IP suppressed, into `to`
  void emit_tnt_bit(bool taken);
  void flush_tnt();
  void emit_psb(bool with_fup, uint64_t ip);
  void emit_tsc();
  // PSB+ (PSB, MODE.Exec, TSC, FUP, PSBEND) into `to`, with no change to the
  // encoder's own stream state.
  void write_psb(std::vector<uint8_t>& to, uint64_t tsc, bool with_fup, uint64_t ip);
  void open_frame(const Block* interrupted, uint64_t handler, bool chained);
  long find_frame(uint64_t resume) const;
  void take_resumes_from_board();
  void resolve_frame(size_t index, uint64_t resume);
  void give_up_top();
  void close_frame(size_t index, std::vector<uint8_t>&& prefix);
  void return_to(uint64_t target);
  void resolve_return_to_user();
  void reenter_from_user(uint64_t entry);
  void learn_entry(uint64_t address);
  bool is_entry(uint64_t address) const;

  EncoderOptions options_;
  ClockFn clock_;
  void* clock_context_;
  pt_encoder* encoder_ = nullptr;
  uint8_t scratch_[64] = {};

  std::vector<uint8_t> out_;
  std::vector<uint8_t> deferred_;
  std::vector<Frame> frames_;
  const Block* prev_ = nullptr;  // last kernel block, null when not in the kernel
  bool started_ = false;         // a PSB+ has been written
  bool in_kernel_ = false;
  bool came_from_user_ = false;  // user code ran since the last kernel block
  uint64_t since_psb_ = 0;       // bytes written to out_ since the last PSB
  uint64_t since_time_ = 0;      // ... since the last PSB or TSC (a TSC goes into deferred packets too)
  bool time_due_ = false;        // the vCPU was idle: a TSC after the next kernel block (note_idle)
  uint64_t last_ip_ = 0;         // decoder's last IP, valid when last_ip_valid_
  bool last_ip_valid_ = false;
  uint64_t tnt_bits_ = 0;
  uint32_t tnt_count_ = 0;
  std::vector<uint64_t> entries_;  // open-addressing set of learnt event entry points
  ResumeBoard* board_ = nullptr;
  uint64_t board_seen_ = 0;  // the board's generation when this encoder last looked
  size_t entry_count_ = 0;
  EncoderStats stats_;
};

}  // namespace ktpt

#endif
