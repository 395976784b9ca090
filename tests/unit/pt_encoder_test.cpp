// Golden tests for the software PT encoder (pt-plugin/pt_encoder.h): known
// control-flow sequences go in, libipt's packet decoder reads what came out,
// and the packets must equal the expected list exactly.
#include <gtest/gtest.h>
#include <intel-pt.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "classify.h"
#include "pt_encoder.h"
#include "plugin_blocks.h"

namespace {

using ktpt::Block;
using ktpt::EndKind;

uint64_t fixed_clock(void*) { return 0x1234; }

using ktpt::testing::kblock;

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRIx64, v);
  return buf;
}

// Every packet as text, with IPs decompressed against the last IP as a decoder would.
std::vector<std::string> packets(std::vector<uint8_t> bytes) {
  std::vector<std::string> result;
  pt_config config;
  pt_config_init(&config);
  config.begin = bytes.data();
  config.end = bytes.data() + bytes.size();
  pt_packet_decoder* decoder = pt_pkt_alloc_decoder(&config);
  EXPECT_NE(decoder, nullptr);
  EXPECT_GE(pt_pkt_sync_set(decoder, 0), 0);
  uint64_t last_ip = 0;
  for (;;) {
    pt_packet p;
    const int status = pt_pkt_next(decoder, &p, sizeof p);
    if (status == -pte_eos) break;
    if (status < 0) {
      result.push_back(std::string("error ") + pt_errstr(pt_errcode(status)));
      break;
    }
    auto ip = [&](const char* name) {
      switch (p.payload.ip.ipc) {
        case pt_ipc_suppressed: return std::string(name);
        case pt_ipc_update_16: last_ip = (last_ip & ~0xffffull) | p.payload.ip.ip; break;
        case pt_ipc_update_32: last_ip = (last_ip & ~0xffffffffull) | p.payload.ip.ip; break;
        case pt_ipc_sext_48:
          last_ip = static_cast<uint64_t>(static_cast<int64_t>(p.payload.ip.ip << 16) >> 16);
          break;
        default: last_ip = p.payload.ip.ip; break;
      }
      return std::string(name) + " " + hex(last_ip);
    };
    switch (p.type) {
      case ppt_psb: result.push_back("psb"); last_ip = 0; break;
      case ppt_psbend: result.push_back("psbend"); break;
      case ppt_mode:
        result.push_back(p.payload.mode.leaf == pt_mol_exec && p.payload.mode.bits.exec.csl ? "mode.exec 64"
                                                                                             : "mode ?");
        break;
      case ppt_tsc: result.push_back("tsc " + hex(p.payload.tsc.tsc)); break;
      case ppt_ovf: result.push_back("ovf"); break;
      case ppt_tnt_8:
      case ppt_tnt_64: {
        std::string bits = "tnt ";
        for (int i = p.payload.tnt.bit_size - 1; i >= 0; --i) bits += (p.payload.tnt.payload >> i) & 1 ? '1' : '0';
        result.push_back(bits);
        break;
      }
      case ppt_tip: result.push_back(ip("tip")); break;
      case ppt_fup: result.push_back(ip("fup")); break;
      case ppt_tip_pge: result.push_back(ip("tip.pge")); break;
      case ppt_tip_pgd: result.push_back(ip("tip.pgd")); break;
      default: result.push_back("other"); break;
    }
  }
  pt_pkt_free_decoder(decoder);
  return result;
}

const std::vector<std::string> kHeader = {"psb", "mode.exec 64", "tsc 1234", "psbend"};

std::vector<std::string> with_header(std::vector<std::string> body) {
  std::vector<std::string> all = kHeader;
  all.insert(all.end(), body.begin(), body.end());
  return all;
}

struct Trace {
  ktpt::EncoderOptions options;
  ktpt::VcpuEncoder encoder;
  std::deque<Block> blocks;  // stable addresses: the encoder keeps a pointer to the last block
  Block user;
  Trace(uint32_t psb = 1u << 30) : options(make(psb)), encoder(options, fixed_clock, nullptr) {}
  static ktpt::EncoderOptions make(uint32_t psb) {
    ktpt::EncoderOptions o;
    o.psb_interval = psb;
    return o;
  }
  void run(const Block& b) {
    blocks.push_back(b);
    encoder.on_block(blocks.back());
  }
  // As the plugin runs a block that is one REP instruction (rep_tb_exec).
  // Returns whether it took the short way.
  bool run_rep_alone(const Block& b) {
    blocks.push_back(b);
    if (encoder.is_rep_repeat(blocks.back())) {
      encoder.take_rep_repeat(blocks.back());
      return true;
    }
    encoder.on_block(blocks.back());
    return false;
  }
  void from_user() { encoder.on_block(user); }
  std::vector<std::string> finish() {
    encoder.stop();
    return packets(encoder.output());
  }
};

constexpr uint64_t K = 0xffffffff81000000ull;

TEST(PtEncoder, ConditionalIndirectAndUserTransitions) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 3, EndKind::Cond, K + 0x200));  // taken
  r.run(kblock(K + 0x200, 2, EndKind::Cond, K + 0x100));  // not taken
  r.run(kblock(K + 0x204, 1, EndKind::DirectCall, K + 0x300));
  r.run(kblock(K + 0x300, 4, EndKind::Return));
  r.run(kblock(K + 0x206, 1, EndKind::Iret));
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "tnt 10", "tip ffffffff81000206", "tip.pgd"}));
}

TEST(PtEncoder, InterruptAfterPlainBlockIsFupNextThenTip) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 3, EndKind::Fallthrough));  // next = K+0x106
  r.run(kblock(K + 0x900, 2, EndKind::Iret));         // handler
  r.run(kblock(K + 0x106, 1, EndKind::Return));       // the iret's target: resolves the frame
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "fup ffffffff81000106", "tip ffffffff81000900",
                                     "tip ffffffff81000106", "tip.pgd"}));
}

TEST(PtEncoder, InterruptHidingAConditionalBranchIsResolvedByTheIret) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 2, EndKind::Cond, K + 0x180));
  r.run(kblock(K + 0x900, 2, EndKind::Cond, K + 0x950));  // handler: its own branch goes not-taken
  r.run(kblock(K + 0x904, 1, EndKind::Iret));
  r.run(kblock(K + 0x180, 1, EndKind::ToUser));  // the interrupted branch was taken
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "tnt 1", "fup ffffffff81000180",
                                     "tip ffffffff81000900", "tnt 0", "tip ffffffff81000180", "tip.pgd"}));
}

TEST(PtEncoder, FaultInsideABlockIsFupAtTheFaultingInstruction) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 4, EndKind::Cond, K + 0x100));  // faults at its 3rd instruction, K+0x104
  r.run(kblock(K + 0x900, 1, EndKind::Iret));
  r.run(kblock(K + 0x104, 2, EndKind::Return));  // re-executes from the faulting instruction
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "fup ffffffff81000104", "tip ffffffff81000900",
                                     "tip ffffffff81000104", "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().resolved_fault, 1u);
}

TEST(PtEncoder, NestedInterruptsResolveInsideOut) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 2, EndKind::Cond, K + 0x180));  // interrupted, resumes not-taken at K+0x104
  r.run(kblock(K + 0x900, 2, EndKind::Fallthrough));      // handler 1, interrupted after it
  r.run(kblock(K + 0xa00, 1, EndKind::Iret));             // handler 2
  r.run(kblock(K + 0x904, 1, EndKind::Iret));             // back in handler 1
  r.run(kblock(K + 0x104, 1, EndKind::ToUser));
  r.from_user();
  EXPECT_EQ(r.finish(),
            with_header({"tip.pge ffffffff81000100", "tnt 0", "fup ffffffff81000104", "tip ffffffff81000900",
                         "fup ffffffff81000904", "tip ffffffff81000a00", "tip ffffffff81000904",
                         "tip ffffffff81000104", "tip.pgd"}));
}

TEST(PtEncoder, SleepingHandlerIsResolvedOutOfOrder) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 2, EndKind::Fallthrough));       // task A, faults/interrupted after: next K+0x104
  r.run(kblock(K + 0x900, 1, EndKind::Return));            // A's handler sleeps: switch to task B
  r.run(kblock(K + 0x500, 2, EndKind::Cond, K + 0x580));   // task B, interrupted after its branch
  r.run(kblock(K + 0xa00, 1, EndKind::Return));            // B's handler sleeps: switch back to A
  r.run(kblock(K + 0x600, 1, EndKind::Iret));              // A's handler returns (to A: not innermost)
  r.run(kblock(K + 0x104, 1, EndKind::Return));            // A runs on, switches to B
  r.run(kblock(K + 0x700, 1, EndKind::Iret));              // B's handler returns: the branch was taken
  r.run(kblock(K + 0x580, 1, EndKind::ToUser));
  r.from_user();
  EXPECT_EQ(r.finish(),
            with_header({"tip.pge ffffffff81000100", "fup ffffffff81000104", "tip ffffffff81000900",
                         "tip ffffffff81000500", "tnt 1", "fup ffffffff81000580", "tip ffffffff81000a00",
                         "tip ffffffff81000600", "tip ffffffff81000104", "tip ffffffff81000700",
                         "tip ffffffff81000580", "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().overflows, 0u);
}

// A page fault on one vCPU whose handler sleeps and returns on another: the
// IRET there fits no frame of its own vCPU, so it goes on the board, and the
// vCPU that holds the frame resolves it with that target at its next block
// (before: an overflow when tracing stopped).
TEST(PtEncoder, AHandlerThatReturnsOnAnotherVcpuResolvesItsFrameThroughTheBoard) {
  ktpt::ResumeBoard board;
  Trace here, there;
  here.encoder.set_resume_board(&board);
  there.encoder.set_resume_board(&board);
  here.from_user();
  here.run(kblock(K + 0x100, 3, EndKind::Fallthrough));  // faults at its 2nd instruction, K+0x102
  here.run(kblock(K + 0x900, 1, EndKind::Return));       // the handler sleeps: another task here
  here.run(kblock(K + 0x500, 1, EndKind::Cond, K + 0x580));
  there.from_user();
  there.run(kblock(K + 0x300, 1, EndKind::Return));      // the handler wakes on the other vCPU
  there.run(kblock(K + 0x600, 1, EndKind::Iret));
  there.run(kblock(K + 0x102, 1, EndKind::ToUser));      // ... and returns to the faulting instruction
  there.from_user();
  EXPECT_EQ(there.encoder.stats().orphan_irets, 1u);
  here.run(kblock(K + 0x580, 1, EndKind::ToUser));       // the next block here takes it
  here.from_user();
  EXPECT_EQ(here.encoder.stats().resolved_elsewhere, 1u);
  EXPECT_EQ(here.finish(), with_header({"tip.pge ffffffff81000100", "fup ffffffff81000102", "tip ffffffff81000900",
                                        "tip ffffffff81000500", "tnt 1", "tip.pgd"}));
  EXPECT_EQ(here.encoder.stats().overflows, 0u);
  EXPECT_EQ(there.finish(), with_header({"tip.pge ffffffff81000300", "tip ffffffff81000600",
                                         "tip ffffffff81000102", "tip.pgd"}));
}

// Without a board (or with no post that fits) the frame is still given up.
TEST(PtEncoder, APostThatFitsNoFrameResolvesNothing) {
  ktpt::ResumeBoard board;
  Trace here;
  here.encoder.set_resume_board(&board);
  EXPECT_FALSE(board.post(nullptr, K + 0x777, 0x1234));  // no frame waits: not posted
  here.from_user();
  here.run(kblock(K + 0x100, 3, EndKind::Fallthrough));
  here.run(kblock(K + 0x900, 1, EndKind::Return));
  here.run(kblock(K + 0x500, 1, EndKind::ToUser));
  here.from_user();
  here.finish();
  EXPECT_EQ(here.encoder.stats().resolved_elsewhere, 0u);
  EXPECT_EQ(here.encoder.stats().overflows, 1u);
  EXPECT_TRUE(board.empty());
  EXPECT_EQ(board.unfit(), 1u);
}

// An IRET that no other vCPU's open frame fits (sync_core()'s, which returns
// from no event) is not posted: idle for long, the vCPU holding the frame a
// real post fits would otherwise find it pushed off by such posts, and give
// the frame up as an overflow.
TEST(PtEncoder, OnlyAnIretAnotherVcpusFrameFitsIsPosted) {
  ktpt::ResumeBoard board;
  Trace here, there;
  here.encoder.set_resume_board(&board);
  there.encoder.set_resume_board(&board);
  here.from_user();
  here.run(kblock(K + 0x100, 3, EndKind::Fallthrough));  // faults at K+0x102
  here.run(kblock(K + 0x900, 1, EndKind::Return));       // the handler sleeps; this vCPU goes idle
  there.from_user();
  there.run(kblock(K + 0x300, 1, EndKind::Return));      // the handler wakes on the other vCPU
  there.run(kblock(K + 0x600, 1, EndKind::Iret));
  there.run(kblock(K + 0x102, 1, EndKind::Return));      // ... returns to the faulting instruction: posted
  for (size_t i = 0; i < 2 * ktpt::ResumeBoard::kMaxPosts; ++i) {
    there.run(kblock(K + 0x400, 1, EndKind::Iret));      // sync_core(): an IRET to its next instruction
    there.run(kblock(K + 0x402, 1, EndKind::Return));
  }
  there.run(kblock(K + 0x500, 1, EndKind::ToUser));
  there.from_user();
  EXPECT_EQ(there.encoder.stats().orphan_irets, 2 * ktpt::ResumeBoard::kMaxPosts + 1);
  EXPECT_EQ(board.unfit(), 2 * ktpt::ResumeBoard::kMaxPosts);
  EXPECT_EQ(board.dropped(), 0u);
  here.run(kblock(K + 0x580, 1, EndKind::ToUser));       // the idle vCPU's next block takes the real post
  here.from_user();
  EXPECT_EQ(here.encoder.stats().resolved_elsewhere, 1u);
  here.finish();
  EXPECT_EQ(here.encoder.stats().overflows, 0u);
  there.finish();
}

TEST(PtEncoder, InterruptRightAfterIretIsChained) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 2, EndKind::Fallthrough));  // next K+0x104
  r.run(kblock(K + 0x900, 1, EndKind::Iret));         // handler 1 returns ...
  r.run(kblock(K + 0x900, 1, EndKind::Iret));         // ... but handler 1 runs again before K+0x104
  r.run(kblock(K + 0x104, 1, EndKind::ToUser));
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "fup ffffffff81000104", "tip ffffffff81000900",
                                     "tip ffffffff81000104", "fup ffffffff81000104", "tip ffffffff81000900",
                                     "tip ffffffff81000104", "tip.pgd"}));
}

TEST(PtEncoder, InterruptAfterReturnIsRecognisedByALearntEntry) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x900, 1, EndKind::Iret));  // an interrupt from user: K+0x900 is an entry point
  r.from_user();
  r.run(kblock(K + 0x100, 1, EndKind::Return));  // syscall path; ret, then the interrupt
  r.run(kblock(K + 0x900, 1, EndKind::Iret));
  r.run(kblock(K + 0x400, 1, EndKind::ToUser));  // where the ret went
  r.from_user();
  EXPECT_EQ(r.finish(),
            with_header({"tip.pge ffffffff81000900", "tip.pgd", "tip.pge ffffffff81000100", "tip ffffffff81000400",
                         "fup ffffffff81000400", "tip ffffffff81000900", "tip ffffffff81000400", "tip.pgd"}));
}

TEST(PtEncoder, RepIterationsCollapseAndAnInterruptedRepIsFupAtIt) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 2, EndKind::Rep));  // rep at K+0x102
  r.run(kblock(K + 0x102, 1, EndKind::Rep));
  r.run(kblock(K + 0x102, 1, EndKind::Rep));
  r.run(kblock(K + 0x900, 1, EndKind::Iret));  // interrupt mid-rep
  r.run(kblock(K + 0x102, 1, EndKind::Rep));
  r.run(kblock(K + 0x104, 1, EndKind::ToUser));
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "fup ffffffff81000102", "tip ffffffff81000900",
                                     "tip ffffffff81000102", "tip.pgd"}));
}

// The plugin's short way for REP iterations writes the same packets and
// counts the same blocks as on_block, and is taken only for an iteration
// after the first: not for a jump to the REP, nor its resumption after an
// IRET, nor after user code.
TEST(PtEncoder, RepIterationsTakenTheShortWayWriteTheSamePackets) {
  auto sequence = [](Trace& r, bool short_way, std::vector<bool>* taken) {
    auto rep = [&](const Block& b) {
      if (short_way) taken->push_back(r.run_rep_alone(b));
      else r.run(b);
    };
    r.from_user();
    r.run(kblock(K + 0x100, 2, EndKind::Rep));  // rep at K+0x102, first iteration
    rep(kblock(K + 0x102, 1, EndKind::Rep));     // 2nd
    rep(kblock(K + 0x102, 1, EndKind::Rep));     // 3rd
    r.run(kblock(K + 0x900, 1, EndKind::Iret));  // interrupt mid-rep
    rep(kblock(K + 0x102, 1, EndKind::Rep));     // resumed: not a repeat
    rep(kblock(K + 0x102, 1, EndKind::Rep));     // a repeat again
    r.run(kblock(K + 0x104, 1, EndKind::DirectJmp, K + 0x102));
    rep(kblock(K + 0x102, 1, EndKind::Rep));     // jumped to: not a repeat
    r.run(kblock(K + 0x104, 1, EndKind::ToUser));
    r.from_user();
    rep(kblock(K + 0x102, 1, EndKind::Rep));     // entered from user: not a repeat
    r.run(kblock(K + 0x104, 1, EndKind::ToUser));
  };
  Trace slow, fast;
  std::vector<bool> taken;
  sequence(slow, false, nullptr);
  sequence(fast, true, &taken);
  EXPECT_EQ(taken, (std::vector<bool>{true, true, false, true, false, false}));
  EXPECT_EQ(fast.encoder.stats().kernel_blocks, slow.encoder.stats().kernel_blocks);
  EXPECT_EQ(fast.encoder.stats().kernel_insns, slow.encoder.stats().kernel_insns);
  EXPECT_EQ(fast.encoder.stats().rep_repeats, 3u);
  EXPECT_EQ(fast.finish(), slow.finish());
}

TEST(PtEncoder, HaltAndSoftwareInterruptNeedNoDeferral) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 1, EndKind::Halt));     // hlt at K+0x100; wakes into the handler
  r.run(kblock(K + 0x900, 1, EndKind::Iret));
  r.run(kblock(K + 0x102, 1, EndKind::SoftInt));  // int3 at K+0x102
  r.run(kblock(K + 0x800, 1, EndKind::Iret));
  r.run(kblock(K + 0x110, 1, EndKind::ToUser));
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "fup ffffffff81000102", "tip ffffffff81000900",
                                     "tip ffffffff81000102", "fup ffffffff81000102", "tip ffffffff81000800",
                                     "tip ffffffff81000110", "tip.pgd"}));
}

// The trigger went off as the vCPU was about to run a block: the stream ends
// at that block's first instruction (FUP + TIP.PGD), after the outcome of
// the conditional branch that led there. With stop() alone the branch has
// no TNT bit before a TIP.PGD without an IP, which perf's decoder calls
// "Trace doesn't match instruction" (libipt takes the branch as the last
// instruction: one more than perf counts).
TEST(PtEncoder, StoppingBeforeABlockEndsAtItsFirstInstructionAfterTheBranchOutcome) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 3, EndKind::Cond, K + 0x200));
  r.encoder.stop_before(kblock(K + 0x200, 2, EndKind::Return));  // taken
  EXPECT_EQ(packets(r.encoder.output()),
            with_header({"tip.pge ffffffff81000100", "tnt 1", "fup ffffffff81000200", "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().stops_at_block, 1u);

  Trace n;  // not taken, and a block cut with no branch
  n.from_user();
  n.run(kblock(K + 0x100, 3, EndKind::Cond, K + 0x200));
  n.run(kblock(K + 0x106, 2, EndKind::Fallthrough));
  n.encoder.stop_before(kblock(K + 0x10a, 1, EndKind::Return));
  EXPECT_EQ(packets(n.encoder.output()),
            with_header({"tip.pge ffffffff81000100", "tnt 0", "fup ffffffff8100010a", "tip.pgd"}));
}

// Where the next block is not where the last one leads (an interrupt), or is
// user code, the stream ends as stop() ends it: no event is told at the end.
TEST(PtEncoder, StoppingBeforeAnEventOrUserCodeIsAPlainStop) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 3, EndKind::Cond, K + 0x200));
  r.encoder.stop_before(kblock(K + 0x900, 2, EndKind::Iret));  // neither target nor next: an interrupt
  EXPECT_EQ(packets(r.encoder.output()), with_header({"tip.pge ffffffff81000100", "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().stops_at_block, 0u);

  Trace u;
  u.from_user();
  u.run(kblock(K + 0x100, 1, EndKind::ToUser));
  u.encoder.stop_before(u.user);
  EXPECT_EQ(packets(u.encoder.output()), with_header({"tip.pge ffffffff81000100", "tip.pgd"}));
}

// A return to user mode whose first user instruction faults (its page not
// present yet): QEMU runs no user block, so the plugin sees the kernel block
// that returned and then the fault handler. A SYSRET always went to user.
TEST(PtEncoder, ASysretWhoseUserCodeFaultsIsADisableThenAnEnable) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 1, EndKind::ToUser));
  r.run(kblock(K + 0x900, 1, EndKind::Iret));  // the page fault handler, from user mode
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "tip.pgd", "tip.pge ffffffff81000900", "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().unseen_user, 1u);
}

// An IRET may return to the kernel, so the handler after it opens a chained
// frame; the handler's own IRET to user mode says where that IRET went. The
// frame ends as it happened instead of staying open (no PSB while it is) and
// becoming an overflow.
TEST(PtEncoder, AnIretWhoseUserCodeFaultsEndsItsChainedFrameAtTheReturnToUser) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x900, 1, EndKind::Iret));  // an interrupt from user: K+0x900 is an entry point
  r.from_user();
  r.run(kblock(K + 0x100, 2, EndKind::Cond, K + 0x200));  // not taken
  r.run(kblock(K + 0x104, 1, EndKind::Iret));             // returns to user, whose code faults at once
  r.run(kblock(K + 0x900, 1, EndKind::Iret));             // the handler returns to user
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000900", "tip.pgd", "tip.pge ffffffff81000100", "tnt 0",
                                     "tip.pgd", "tip.pge ffffffff81000900", "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().unseen_user, 1u);
  EXPECT_EQ(r.encoder.stats().overflows, 0u);
}

TEST(PtEncoder, UnresolvableFrameBecomesOverflow) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 1, EndKind::Cond, K + 0x180));
  r.run(kblock(K + 0x900, 1, EndKind::Iret));
  r.run(kblock(K + 0x700, 1, EndKind::ToUser));  // neither the target nor next: unknown
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "ovf", "fup ffffffff81000900", "psb", "mode.exec 64",
                                     "tsc 1234", "fup ffffffff81000900", "psbend", "tip ffffffff81000700",
                                     "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().overflows, 1u);
}

// What libipt's query decoder makes of an overflow the encoder writes: the
// OVF binds to the FUP after it, so tracing stays enabled and resumes at the
// handler, and the TNT that follows is a branch to query, not an error.
TEST(PtEncoder, AnOverflowResumesTracingAtTheHandlerForLibipt) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 1, EndKind::Cond, K + 0x180));
  r.run(kblock(K + 0x900, 1, EndKind::Iret));
  r.run(kblock(K + 0x700, 1, EndKind::Cond, K + 0x780));  // neither the target nor next: the frame is given up
  r.run(kblock(K + 0x780, 1, EndKind::ToUser));
  r.from_user();
  r.encoder.stop();
  std::vector<uint8_t> pt = r.encoder.output();
  pt_config config;
  pt_config_init(&config);
  config.begin = pt.data();
  config.end = pt.data() + pt.size();
  pt_query_decoder* q = pt_qry_alloc_decoder(&config);
  ASSERT_NE(q, nullptr);
  uint64_t ip = 0;
  int status = pt_qry_sync_forward(q, &ip);
  ASSERT_GE(status, 0) << pt_errstr(pt_errcode(status));
  bool overflow_seen = false, tnt_after_overflow = false;
  while (status >= 0) {
    while (status & pts_event_pending) {
      pt_event ev;
      status = pt_qry_event(q, &ev, sizeof ev);
      ASSERT_GE(status, 0) << pt_errstr(pt_errcode(status));
      if (ev.type == ptev_overflow) {
        overflow_seen = true;
        EXPECT_FALSE(ev.ip_suppressed) << "an OVF without its FUP: libipt takes tracing to be off";
        EXPECT_EQ(ev.variant.overflow.ip, K + 0x900);
      }
    }
    if (status & pts_eos) break;
    int taken = 0;
    status = pt_qry_cond_branch(q, &taken);
    if (status >= 0) {
      if (overflow_seen) tnt_after_overflow = true;
      continue;
    }
    if (pt_errcode(status) != pte_bad_query) break;
    status = pt_qry_indirect_branch(q, &ip);
  }
  EXPECT_TRUE(pt_errcode(status) == pte_eos || status >= 0) << pt_errstr(pt_errcode(status));
  EXPECT_TRUE(overflow_seen);
  EXPECT_TRUE(tnt_after_overflow) << "the handler's own conditional branch is queried after the overflow";
  pt_qry_free_decoder(q);
}

TEST(PtEncoder, PsbPlusAtTheIntervalAndTntPackingAndCompression) {
  Trace r(16);
  r.from_user();
  for (int i = 0; i < 8; ++i) r.run(kblock(K + 0x100, 1, EndKind::Cond, K + 0x100));  // 7 taken, then out
  r.run(kblock(K + 0x102, 1, EndKind::Indirect));
  r.run(kblock(K + 0x1234, 1, EndKind::ToUser));
  r.from_user();
  // Eight bits do not fit a TNT-8 (six): one TNT-64.  TNT bits are written
  // only when a non-TNT packet follows, so the PSB+ comes at the first block
  // after the TIP, with FUP at that block.
  const std::vector<std::string> got = r.finish();
  EXPECT_EQ(got, with_header({"tip.pge ffffffff81000100", "tnt 11111110", "tip ffffffff81001234", "psb",
                              "mode.exec 64", "tsc 1234", "fup ffffffff81001234", "psbend", "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().psbs, 2u);
}

TEST(PtEncoder, WhileAFrameIsOpenTheTimeComesAsTscInItsPacketsNotAsPsb) {
  Trace r(8);
  r.from_user();
  r.run(kblock(K + 0x100, 1, EndKind::Cond, K + 0x180));
  r.run(kblock(K + 0x900, 1, EndKind::Indirect));  // an interrupt: the frame stays open ...
  for (int i = 0; i < 4; ++i) r.run(kblock(K + 0x910, 1, EndKind::Indirect));  // ... while its handler runs
  r.run(kblock(K + 0x920, 1, EndKind::Iret));
  r.run(kblock(K + 0x180, 1, EndKind::ToUser));  // the IRET resolves it: the jcc was taken
  r.from_user();
  const auto out = r.finish();
  const auto begin = std::find(out.begin(), out.end(), "tip ffffffff81000900");  // the event's TIP
  const auto end = std::find(begin, out.end(), "tip ffffffff81000180");          // the IRET's
  ASSERT_NE(end, out.end());
  EXPECT_EQ(std::count(begin, end, "psb"), 0);       // no PSB inside the frame's packets
  EXPECT_GE(std::count(begin, end, "tsc 1234"), 1);  // ... but the time
  EXPECT_EQ(out.back(), "tip.pgd");
}

// An idle vCPU writes nothing: the first kernel block after the wakeup is
// followed by a TSC, once, after the wakeup's event packets (the interrupt
// that ended the HLT), so that what runs next is decoded at the new time.
TEST(PtEncoder, AfterAnIdleSpellTheTimeComesOnceAfterTheWakeupEvent) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 1, EndKind::Cond, K + 0x180));
  r.run(kblock(K + 0x180, 2, EndKind::Halt));
  r.encoder.note_idle();
  r.run(kblock(K + 0x900, 1, EndKind::Cond, K + 0x980));  // the interrupt that woke it
  r.run(kblock(K + 0x980, 1, EndKind::Cond, K + 0x9c0));
  r.run(kblock(K + 0x982, 1, EndKind::ToUser));
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "tnt 1", "fup ffffffff81000184",
                                     "tip ffffffff81000900", "tsc 1234", "tnt 10",
                                     "tip.pgd"}));
  EXPECT_EQ(r.encoder.stats().idle_tscs, 1u);
}

TEST(PtEncoder, TruncatedBlockContinuesWithoutPackets) {
  Trace r;
  r.from_user();
  r.run(kblock(K + 0x100, 4, EndKind::Cond, K + 0x100));
  r.run(kblock(K + 0x104, 2, EndKind::Cond, K + 0x100));  // QEMU restarted mid-block (self-modifying code)
  r.run(kblock(K + 0x100, 1, EndKind::ToUser));
  r.from_user();
  EXPECT_EQ(r.finish(), with_header({"tip.pge ffffffff81000100", "tnt 1", "tip.pgd"}));
}

struct ClassCase {
  std::vector<uint8_t> bytes;
  EndKind kind;
  uint64_t target;
};

TEST(PtClassify, LastInstructionKinds) {
  const uint64_t at = 0xffffffff81000000ull;
  const std::vector<ClassCase> cases = {
      {{0x74, 0x10}, EndKind::Cond, at + 0x12},                               // je +0x10
      {{0x0f, 0x85, 0x00, 0x01, 0x00, 0x00}, EndKind::Cond, at + 0x106},     // jne rel32
      {{0xe2, 0xfe}, EndKind::Cond, at},                                      // loop self
      {{0xe3, 0x05}, EndKind::Cond, at + 7},                                  // jrcxz
      {{0xeb, 0x00}, EndKind::DirectJmp, at + 2},                             // jmp rel8
      {{0xe8, 0x10, 0x00, 0x00, 0x00}, EndKind::DirectCall, at + 0x15},       // call rel32
      {{0xff, 0xd0}, EndKind::Indirect, 0},                                   // call *rax
      {{0xff, 0xe0}, EndKind::Indirect, 0},                                   // jmp *rax
      {{0xc3}, EndKind::Return, 0},                                           // ret
      {{0x48, 0xcf}, EndKind::Iret, 0},                                       // iretq
      {{0x48, 0x0f, 0x07}, EndKind::ToUser, 0},                               // sysretq
      {{0xcc}, EndKind::SoftInt, 0},                                          // int3
      {{0x0f, 0x0b}, EndKind::SoftInt, 0},                                    // ud2
      {{0xf4}, EndKind::Halt, 0},                                             // hlt
      {{0xf3, 0xa4}, EndKind::Rep, 0},                                        // rep movsb
      {{0xf3, 0x48, 0xab}, EndKind::Rep, 0},                                  // rep stosq
      {{0xa4}, EndKind::Fallthrough, 0},                                      // movsb, no rep
      {{0xf3, 0x90}, EndKind::Fallthrough, 0},                                // pause
      {{0x48, 0x89, 0xc3}, EndKind::Fallthrough, 0},                          // mov rbx, rax
  };
  for (const ClassCase& c : cases) {
    const ktpt::EndClass got = ktpt::classify_instruction(c.bytes.data(), c.bytes.size(), at);
    EXPECT_TRUE(got.valid);
    EXPECT_EQ(static_cast<int>(got.kind), static_cast<int>(c.kind)) << "bytes starting " << hex(c.bytes[0]);
    if (c.target) {
      EXPECT_EQ(got.target, c.target) << "bytes starting " << hex(c.bytes[0]);
    }
  }
  EXPECT_TRUE(ktpt::is_rep_string(std::vector<uint8_t>{0xf3, 0xa4}.data(), 2));
  EXPECT_FALSE(ktpt::is_rep_string(std::vector<uint8_t>{0xf3, 0x90}.data(), 2));
}

}  // namespace
