// The decoder against synthetic PT (libipt's encoder) over hand-assembled
// code: exact flow and exact counts, text pokes, BPF address reuse, error
// classes, and parallel == sequential.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "kthost/decode/analysis.h"
#include "kthost/decode/coverage.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/report.h"
#include "../fuzz/decode_pt_fixture.h"
#include "synthetic_bundle.h"

namespace kt {
namespace {

using test::kF;
using test::kG;
using test::kMain;
using test::kText;

class DecodeTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const auto& dir : dirs_) std::filesystem::remove_all(dir);
  }
  // Each call writes its own bundle; every one is removed at the end.
  Analysis open(const test::SynthBundle& b) {
    const std::string dir = dirs_.emplace_back(test::make_temp_dir("decode"));
    b.write(dir + "/b");
    auto a = open_analysis(dir + "/b");
    if (!a) ADD_FAILURE() << a.error().message;
    return std::move(*a);
  }
  Profile decode(const Analysis& a, unsigned threads = 1, uint64_t window = 0) {
    DecodeOptions o;
    o.threads = threads;
    o.align_window = window;
    o.chunk_bytes = 64;  // many chunks even for small traces
    auto p = decode_profile(a.bundle.pt, *a.image, a.symbols, o);
    if (!p) ADD_FAILURE() << p.error().message;
    // Every trace here is also a test of the coverage fast path: its answer
    // is the full decoder's, exactly.
    auto c = decode_coverage(a.bundle.pt, *a.image, a.symbols, o);
    if (!c) {
      ADD_FAILURE() << c.error().message;
    } else {
      auto d = coverage_differences(*c, coverage_of(*p), a.symbols);
      EXPECT_EQ(d.count, 0u) << (d.examples.empty() ? "" : d.examples.front());
      EXPECT_EQ(c->insns, p->insns);
      last_coverage_ = std::move(*c);
    }
    return std::move(*p);
  }
  static uint64_t insns_of(const Profile& p, const Symbolizer& s, const std::string& name) {
    for (const auto& [id, c] : p.functions)
      if (s.function(id).name == name) return c.insns;
    return 0;
  }
  static uint64_t calls_of(const Profile& p, const Symbolizer& s, const std::string& name) {
    for (const auto& [id, c] : p.functions)
      if (s.function(id).name == name) return c.calls;
    return 0;
  }
  std::vector<std::string> dirs_;
  Coverage last_coverage_;  // the fast path's answer for the last decode()
};

test::SynthBundle core_bundle(size_t text_size = 0x1000) {
  test::SynthBundle b;
  b.text.push_back(test::text_record(TextSource::Snapshot, 0, kText, test::core_text(text_size), "core"));
  b.kallsyms = test::core_kallsyms();
  return b;
}

// The packets of main_func's loop from f_func's first ret on: the ret, jne
// taken twice (calling f_func again), then main_func's ret to user mode.
void main_loop_from_first_ret(test::PtWriter& w) {
  w.tip(kMain + 7);  // f_func's ret
  w.tnt(true);       // jne taken: call f_func again
  w.tip(kMain + 7);
  w.tnt(true);
  w.tip(kMain + 7);
  w.tnt(false);
  w.pgd(test::kUserAddress);  // main_func's ret
}

// main_func's trace in two pieces: tracing starts at main_func, and the
// second PSB (its FUP at `fup`, inside f_func) comes before f_func's first ret.
test::SynthBundle two_pieces_split_in_f(uint64_t fup) {
  auto b = core_bundle();
  test::PtWriter w;
  w.psb(100);
  w.pge(kMain);
  w.psb_at(200, fup);
  main_loop_from_first_ret(w);
  b.pt[0] = w.finish();
  return b;
}

TEST_F(DecodeTest, LoopWithCallsGivesExactCounts) {
  auto b = core_bundle();
  test::PtWriter w;
  w.psb(100);
  EXPECT_EQ(test::walk(w, test::main_program(), kMain, test::main_decisions()), 20u);
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.insns, 20u);
  EXPECT_EQ(insns_of(p, a.symbols, "main_func"), 14u);
  EXPECT_EQ(insns_of(p, a.symbols, "f_func"), 6u);
  EXPECT_EQ(calls_of(p, a.symbols, "f_func"), 3u);
  EXPECT_EQ(calls_of(p, a.symbols, "main_func"), 0u);
  ASSERT_EQ(p.edges.size(), 1u);
  EXPECT_EQ(a.symbols.function(p.edges.begin()->first.first).name, "main_func");
  EXPECT_EQ(a.symbols.function(p.edges.begin()->first.second).name, "f_func");
  EXPECT_EQ(p.edges.begin()->second, 3u);
  EXPECT_TRUE(p.error_counts.empty());
  EXPECT_EQ(folded_stacks(p, a.symbols), "main_func 14\nmain_func;f_func 6\n");
  // The coverage fast path walked the piece itself: main_func's entry, f_func's
  // entry, the return address (three times) and the loop's way out.
  EXPECT_EQ(last_coverage_.fast_pieces, last_coverage_.pieces);
  EXPECT_TRUE(last_coverage_.fallback_reasons.empty());
  EXPECT_EQ(last_coverage_.blocks_seen.size(), p.blocks_seen.size());
  EXPECT_GE(last_coverage_.blocks_seen.size(), 3u);
  // The baselines (libipt's instruction decoder, and its block decoder used
  // plainly) agree.
  auto base = count_insns_baseline(a.bundle.pt.at(0), *a.image);
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(*base, 20u);
  auto block_base = count_insns_block_baseline(a.bundle.pt.at(0), *a.image);
  ASSERT_TRUE(block_base.ok());
  EXPECT_EQ(*block_base, 20u);
  // The phases add up to no more than the decode's time.
  for (const char* phase : {"split", "decode", "merge", "stitch"}) EXPECT_EQ(p.phase_seconds.count(phase), 1u) << phase;
  double sum = 0;
  for (const auto& [name, s] : p.phase_seconds) sum += s;
  EXPECT_LE(sum, p.seconds);
}

// A block that falls through a symbol (a label in entry code, a cold part)
// counts each instruction for the function it lies in, as perf does: here a
// symbol at main_func+9 takes the loop's cmp and jne and the final ret.
TEST_F(DecodeTest, ABlockThatFallsThroughASymbolCountsEachPartForItsFunction) {
  auto b = core_bundle();
  b.kallsyms = "ffffffff81000000 T main_func\nffffffff81000009 t main_tail\nffffffff81000100 T f_func\n"
               "ffffffff81000200 T g_func\nffffffff81000300 T h_func\n";
  test::PtWriter w;
  w.psb(100);
  EXPECT_EQ(test::walk(w, test::main_program(), kMain, test::main_decisions()), 20u);
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.insns, 20u);
  EXPECT_EQ(insns_of(p, a.symbols, "main_func"), 7u);  // xor, then call and inc three times
  EXPECT_EQ(insns_of(p, a.symbols, "main_tail"), 7u);  // cmp and jne three times, ret
  EXPECT_EQ(insns_of(p, a.symbols, "f_func"), 6u);
  EXPECT_EQ(calls_of(p, a.symbols, "f_func"), 3u);
  EXPECT_EQ(calls_of(p, a.symbols, "main_tail"), 0u);  // fallen into, not called
  EXPECT_TRUE(p.error_counts.empty());
}

TEST_F(DecodeTest, InstructionTraceIsTheExactFlow) {
  auto b = core_bundle();
  test::PtWriter w;
  w.psb(100);
  std::vector<uint64_t> expected;
  test::walk(w, test::main_program(), kMain, test::main_decisions(), &expected);
  b.pt[0] = w.finish();
  Analysis a = open(b);
  auto lines = decode_trace(a.bundle.pt, *a.image, a.symbols, std::nullopt, 0, UINT64_MAX);
  ASSERT_TRUE(lines.ok());
  std::vector<uint64_t> got;
  for (const auto& l : *lines)
    if (l.size) got.push_back(l.ip);
  EXPECT_EQ(got, expected);
  ASSERT_GE(lines->size(), 3u);
  EXPECT_EQ(lines->front().kind, "trace-begin");
  EXPECT_EQ((*lines)[2].kind, "call");  // xor, then the call
  EXPECT_EQ(a.symbols.function((*lines)[3].function).name, "f_func");
}

// text_poke at time 200 turns g_func's nop5 into a jump: the run at 100 takes
// the old path (3 instructions), the run at 300 the new one (5).
class PokeTest : public DecodeTest, public ::testing::WithParamInterface<size_t> {};

test::SynthBundle poke_bundle(size_t text_size, uint64_t poke_time) {
  auto b = core_bundle(text_size);
  test::PtWriter w;
  w.psb(100);
  test::walk(w, test::g_program(false), kG, [](uint64_t) { return false; });
  w.tsc(300);
  test::walk(w, test::g_program(true), kG, [](uint64_t) { return false; });
  b.pt[0] = w.finish();
  b.events.push_back(test::text_poke(poke_time, kG, test::kGOld, test::kGNew));
  return b;
}

TEST_P(PokeTest, FlowFlipsAtThePoke) {
  Analysis a = open(poke_bundle(GetParam(), 200));
  EXPECT_EQ(a.image->stats().pokes_old_mismatch, 0u);
  Profile p = decode(a);
  EXPECT_TRUE(p.error_counts.empty());
  EXPECT_EQ(insns_of(p, a.symbols, "g_func"), 3u + 5u);
  auto lines = decode_trace(a.bundle.pt, *a.image, a.symbols, std::nullopt, 0, UINT64_MAX);
  ASSERT_TRUE(lines.ok());
  std::vector<uint64_t> before, after;
  for (const auto& l : *lines)
    if (l.size) (l.time < 200 ? before : after).push_back(l.ip);
  EXPECT_EQ(before, (std::vector<uint64_t>{kG, kG + 5, kG + 6}));
  EXPECT_EQ(after, (std::vector<uint64_t>{kG, kG + 0x20, kG + 0x22, kG + 0x24, kG + 0x25}));
}

// The poke's sideband time (350) is late: the run at 300 already has the new
// code. Decoded with the old bytes it disagrees with the packets (a TNT
// where the old code has no branch); the candidate moved by the window agrees.
TEST_P(PokeTest, MisalignedPokeIsResolvedByCandidates) {
  Analysis a = open(poke_bundle(GetParam(), 350));
  Profile naive = decode(a, 1, 0);
  EXPECT_GT(naive.error_counts[DecodeErrorKind::Desync], 0u);
  Profile p = decode(a, 1, 100);
  EXPECT_TRUE(p.error_counts.empty());
  EXPECT_EQ(p.alignment_retries, 1u);
  EXPECT_EQ(p.alignment_fixed, 1u);
  EXPECT_EQ(insns_of(p, a.symbols, "g_func"), 8u);
}

// An estimated sideband clock (kthost trace's arrival-time estimate) can put
// a poke far later than the window of pieces: at 100000 here. With the
// clock's uncertainty the piece with errors is tried just after and just
// before each nearby change, and the one after the poke decodes cleanly.
TEST_P(PokeTest, APokeFarOffByAnEstimatedClockIsFoundNearby) {
  Analysis a = open(poke_bundle(GetParam(), 100000));
  DecodeOptions o;
  o.threads = 1;
  o.align_window = 0;
  auto naive = decode_profile(a.bundle.pt, *a.image, a.symbols, o);
  ASSERT_TRUE(naive) << naive.error().message;
  EXPECT_GT(naive->error_counts[DecodeErrorKind::Desync], 0u);
  o.clock_uncertainty = 200000;
  auto p = decode_profile(a.bundle.pt, *a.image, a.symbols, o);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_TRUE(p->error_counts.empty());
  EXPECT_EQ(p->alignment_fixed, 1u);
  EXPECT_EQ(insns_of(*p, a.symbols, "g_func"), 8u);
  // Too far for the uncertainty: left as an error, never guessed.
  o.clock_uncertainty = 1000;
  auto far = decode_profile(a.bundle.pt, *a.image, a.symbols, o);
  ASSERT_TRUE(far) << far.error().message;
  EXPECT_GT(far->error_counts[DecodeErrorKind::Desync], 0u);
}

// 4 KiB text is copied whole on a poke; 128 KiB gets a poked overlay page.
INSTANTIATE_TEST_SUITE_P(SmallAndLargeText, PokeTest, ::testing::Values(size_t{0x1000}, size_t{0x20000}));

// One BPF program unloaded, another loaded at the same address: each run
// decodes with its own bytes and gets its own name.
TEST_F(DecodeTest, BpfAddressReuseDecodesEachProgramWithItsOwnBytes) {
  constexpr uint64_t kX = 0xffffffffc0001000ull;
  const std::vector<uint8_t> p1 = {0x31, 0xc0, 0xc3};                          // xor; ret
  const std::vector<uint8_t> p2 = {0x90, 0x85, 0xc0, 0x74, 0x00, 0x90, 0xc3};  // nop; test; jz; nop; ret
  for (bool with_load_copy : {true, false}) {
    SCOPED_TRACE(with_load_copy ? "load copy + guard copy" : "guard copy only");
    test::SynthBundle b = core_bundle();
    b.events.push_back(test::ksymbol(50, kX, p1.size(), "bpf_prog_1111_first", false));
    b.events.push_back(test::ksymbol(150, kX, p1.size(), "bpf_prog_1111_first", true));
    b.events.push_back(test::ksymbol(200, kX, p2.size(), "bpf_prog_2222_second", false));
    if (with_load_copy) b.text.push_back(test::text_record(TextSource::Load, 50, kX, p1));
    b.text.push_back(test::text_record(TextSource::Guard, 150, kX, p1));
    b.text.push_back(test::text_record(TextSource::Load, 200, kX, p2));
    test::PtWriter w;
    w.psb(100);
    test::walk(w, {{kX, {2, test::SimInsn::Other, 0}}, {kX + 2, {1, test::SimInsn::Ret, 0}}}, kX,
               [](uint64_t) { return false; });
    w.tsc(300);
    test::walk(w,
               {{kX, {1, test::SimInsn::Other, 0}},
                {kX + 1, {2, test::SimInsn::Other, 0}},
                {kX + 3, {2, test::SimInsn::Jcc, kX + 5}},
                {kX + 5, {1, test::SimInsn::Other, 0}},
                {kX + 6, {1, test::SimInsn::Ret, 0}}},
               kX, [](uint64_t) { return true; });
    b.pt[0] = w.finish();
    Analysis a = open(b);
    Profile p = decode(a);
    EXPECT_TRUE(p.error_counts.empty());
    EXPECT_EQ(insns_of(p, a.symbols, "bpf_prog_1111_first"), 2u);
    EXPECT_EQ(insns_of(p, a.symbols, "bpf_prog_2222_second"), 5u);
    EXPECT_EQ(p.insns, 7u);
    for (const auto& [id, c] : p.functions) EXPECT_EQ(a.symbols.function(id).module, "bpf");
  }
}

TEST_F(DecodeTest, ErrorsAreClassifiedWithAddressAndTime) {
  auto b = core_bundle();
  test::PtWriter w;
  w.psb(100);
  w.pge(0xffffffff82000000ull);  // no text there
  w.psb(200);
  w.ovf();
  w.tsc(250);
  test::walk(w, test::main_program(), kMain, test::main_decisions());
  w.psb(300);
  w.pge(kMain);  // f_func returns, then the loop's branch wants a TNT: the trace gives a TIP
  w.tip(kMain + 7);
  w.tip(kF);
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::NoText], 1u);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::Overflow], 1u);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::Desync], 1u);
  ASSERT_EQ(p.errors.size(), 3u);
  EXPECT_EQ(p.errors[0].kind, DecodeErrorKind::NoText);
  EXPECT_EQ(p.errors[0].ip, 0xffffffff82000000ull);
  EXPECT_EQ(p.errors[0].time, 100u);
  EXPECT_EQ(p.errors[1].kind, DecodeErrorKind::Overflow);
  EXPECT_EQ(p.errors[2].kind, DecodeErrorKind::Desync);
  EXPECT_EQ(p.errors[2].time, 300u);
  // 6 in the run after the overflow, 2 before the desync.
  EXPECT_EQ(insns_of(p, a.symbols, "f_func"), 8u);
}

// After an OVF the time stays stale until the next timing packet: text that
// is missing at that stale time is part of the overflow's loss. Once a later
// time arrives, missing text is a no-text error again.
TEST_F(DecodeTest, MissingTextRightAfterAnOverflowIsTheOverflows) {
  auto b = core_bundle();
  test::PtWriter w;
  w.psb(100);
  w.ovf();
  w.pge(0xffffffff82000000ull);  // no text there, at the stale time 100
  w.psb(200);
  w.pge(0xffffffff82000000ull);  // the same, with the time known (200)
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::Overflow], 2u);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::NoText], 1u);
  ASSERT_EQ(p.errors.size(), 3u);
  EXPECT_EQ(p.errors[1].kind, DecodeErrorKind::Overflow);
  EXPECT_EQ(p.errors[1].ip, 0xffffffff82000000ull);
  EXPECT_NE(p.errors[1].detail.find("after an overflow"), std::string::npos) << p.errors[1].detail;
  EXPECT_EQ(p.errors[2].kind, DecodeErrorKind::NoText);
  EXPECT_EQ(p.errors[2].time, 200u);
}

// The static check of stacks: each caller -> callee step must be a call the
// caller's machine code can make.
TEST_F(DecodeTest, EveryStackStepHasACallSiteInTheCallersText) {
  auto b = core_bundle();
  test::PtWriter w;
  w.psb(100);
  test::walk(w, test::main_program(), kMain, test::main_decisions());
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.stack_edges.steps, 1u);  // main_func -> f_func
  EXPECT_EQ(p.stack_edges.failed, 0u);
  EXPECT_EQ(p.stack_edges.unchecked, 0u);
  // A step main_func's text cannot make: it calls only f_func.
  const uint32_t main_id = a.symbols.lookup(kMain, 0), g_id = a.symbols.lookup(kG, 0);
  Profile fake;
  fake.stacks[{main_id, g_id}] = 7;
  fake.stacks[{main_id, a.symbols.lookup(kF, 0)}] = 5;
  StackEdgeCheck e = check_stack_edges(fake, *a.image, a.symbols);
  EXPECT_EQ(e.steps, 2u);
  EXPECT_EQ(e.failed, 1u);
  EXPECT_EQ(e.failed_insns, 7u);
  ASSERT_EQ(e.examples.size(), 1u);
  EXPECT_EQ(e.examples[0], std::make_pair(main_id, g_id));
  // Below [base unknown] nothing is claimed.
  fake.stacks.clear();
  fake.stacks[{a.symbols.base_unknown(), g_id}] = 3;
  EXPECT_EQ(check_stack_edges(fake, *a.image, a.symbols).steps, 0u);
}

// Two steps with no call site that are not errors: the exit code of an
// interrupt (.entry.text) on top of what it struck, and a function run in
// place of one whose ftrace site is on (an IPMODIFY redirect, as ktguard's
// hooks and livepatch do). With the ftrace site a NOP, the same step fails.
TEST_F(DecodeTest, EntryCodeAndAnFtraceRedirectAreNotMissingCallSites) {
  auto text_with = [](bool ftrace_on) {
    std::vector<uint8_t> t(0x1000, 0xcc);
    const std::vector<uint8_t> caller = {0xe8, 0xfb, 0x00, 0x00, 0x00, 0xc3};  // call f_func; ret
    std::vector<uint8_t> f = {0xf3, 0x0f, 0x1e, 0xfa};                        // endbr64
    if (ftrace_on) f.insert(f.end(), {0xe8, 0xf7, 0x02, 0x00, 0x00});          // call ftrace_tramp (+0x400)
    else f.insert(f.end(), {0x0f, 0x1f, 0x44, 0x00, 0x00});                    // nop5
    f.push_back(0xc3);
    std::copy(caller.begin(), caller.end(), t.begin());
    std::copy(f.begin(), f.end(), t.begin() + 0x100);
    t[0x200] = 0xc3;  // wrap_func
    t[0x310] = 0xcf;  // restore_regs: iretq (one byte of it)
    t[0x400] = 0xc3;  // ftrace_tramp
    return t;
  };
  for (bool on : {true, false}) {
    test::SynthBundle b;
    b.text.push_back(test::text_record(TextSource::Snapshot, 0, kText, text_with(on), "core"));
    b.kallsyms = "ffffffff81000000 T main_func\nffffffff81000100 T f_func\nffffffff81000200 T wrap_func\n"
                 "ffffffff81000300 T __entry_text_start\nffffffff81000310 T restore_regs\n"
                 "ffffffff81000380 T __entry_text_end\nffffffff81000400 T ftrace_tramp\n";
    test::PtWriter w;
    w.psb(100);
    b.pt[0] = w.finish();
    Analysis a = open(b);
    const uint32_t main_id = a.symbols.lookup(kMain, 0);
    Profile fake;
    fake.stacks[{main_id, a.symbols.lookup(kText + 0x200, 0)}] = 7;  // main_func -> wrap_func
    fake.stacks[{main_id, a.symbols.lookup(kText + 0x310, 0)}] = 2;  // main_func -> restore_regs
    StackEdgeCheck e = check_stack_edges(fake, *a.image, a.symbols);
    EXPECT_EQ(e.steps, 2u);
    EXPECT_EQ(e.interrupts, 1u) << "restore_regs lies in the entry text";
    EXPECT_EQ(e.ftrace_redirects, on ? 1u : 0u);
    EXPECT_EQ(e.failed, on ? 0u : 1u);
    EXPECT_EQ(e.failed_insns, on ? 0u : 7u);
  }
}

// The software PT plugin follows an OVF with a PSB+ carrying the time
// execution resumed: text loaded after the last timing packet is found, and
// nothing after the overflow is lost.
TEST_F(DecodeTest, APsbAfterAnOverflowGivesTheTimeTextIsPickedBy) {
  constexpr uint64_t kMod = 0xffffffffc0200000ull;
  auto b = core_bundle();
  b.modules = "dummy 4096 0 - Live 0xffffffffc0200000\n";
  b.text.push_back(test::text_record(TextSource::Load, 150, kMod, {0x90, 0x90, 0xc3}, "dummy"));
  test::PtWriter w;
  w.psb(100);
  w.ovf();
  w.psb_at(200, kMod);  // tracing resumes in the module, loaded at 150
  w.tip(kMain);
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::Overflow], 1u);
  EXPECT_EQ(p.error_counts.count(DecodeErrorKind::NoText), 0u);
  EXPECT_EQ(p.skipped_bytes, 0u);
  uint64_t in_module = 0;
  for (const auto& [id, c] : p.functions)
    if (a.symbols.function(id).module == "dummy") in_module += c.insns;
  EXPECT_EQ(in_module, 3u);
}

// The software PT plugin's overflow: OVF, the FUP where tracing resumed,
// then PSB+. The coverage fast path walks it as libipt does (the overflow is
// taken where the walk stands, after the branch the last packet decided)
// instead of handing the piece (megabytes, as a frame kept PSBs away) to
// the full decoder.
TEST_F(DecodeTest, TheCoverageFastPathWalksAnOverflowAsTheFullDecoderDoes) {
  auto b = core_bundle();
  test::PtWriter w;
  w.psb(100);
  w.pge(kMain);          // main_func: +0, the call; f_func: +0, its ret
  w.tip(kMain + 7);      // back in main_func: inc, cmp, jne
  w.tnt(true);           // the loop goes on at +2 ...
  w.ovf();               // ... but the overflow comes first: the call at +2 is not taken as run
  w.fup(kF);             // tracing resumed in f_func
  w.psb_at(200, kF);
  w.tip(kMain + 7);      // f_func: +0, its ret; main_func: inc, cmp, jne
  w.tnt(false);          // falls through to its ret, whose target is the next piece's
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::Overflow], 1u);
  EXPECT_EQ(insns_of(p, a.symbols, "main_func"), 8u);
  EXPECT_EQ(insns_of(p, a.symbols, "f_func"), 4u);
  EXPECT_EQ(last_coverage_.fallback_bytes, 0u);
  EXPECT_EQ(last_coverage_.fast_pieces, last_coverage_.pieces);
  EXPECT_EQ(last_coverage_.fallback_reasons.count("an overflow"), 0u);
}

// Text that loops with no branch needing trace (here `1: pause; jmp 1b`, as
// in panic_smp_self_stop) makes libipt return blocks forever without reading
// a packet. The decode must stop it, say where, and go on with the next piece.
TEST_F(DecodeTest, ALoopOfDirectJumpsIsAnErrorNotAHang) {
  test::SynthBundle b;
  std::vector<uint8_t> text = test::core_text(0x1000);
  const std::vector<uint8_t> spin = {0xf3, 0x90, 0xeb, 0xfc};  // h_func: pause; jmp h_func
  std::copy(spin.begin(), spin.end(), text.begin() + 0x300);
  b.text.push_back(test::text_record(TextSource::Snapshot, 0, kText, text, "core"));
  b.kallsyms = test::core_kallsyms();
  test::PtWriter w;
  w.psb(100);
  w.pge(kText + 0x300);
  w.psb(200);
  test::walk(w, test::main_program(), kMain, test::main_decisions());
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  EXPECT_EQ(p.error_counts[DecodeErrorKind::Other], 1u);
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0].ip, kText + 0x300);
  EXPECT_NE(p.errors[0].detail.find("loops with no branch"), std::string::npos) << p.errors[0].detail;
  EXPECT_EQ(insns_of(p, a.symbols, "f_func"), 6u) << "the next piece is decoded";
  // The loop's turns after the PGE's packet are not confirmed by any packet
  // (the trace goes on elsewhere): they are dropped and counted as dropped.
  EXPECT_LE(insns_of(p, a.symbols, "h_func"), 2u);
  EXPECT_GT(p.loop_insns_dropped, uint64_t{1} << 20);  // 2^20 turns of 2 instructions
}

TEST_F(DecodeTest, ParallelDecodeEqualsSequential) {
  auto b = core_bundle();
  for (uint32_t cpu : {0u, 1u}) {
    test::PtWriter w;
    for (int i = 0; i < 200; ++i) {
      w.psb(1000 + 10 * i);
      test::walk(w, test::main_program(), kMain, test::main_decisions());
      test::walk(w, test::g_program(false), kG, [](uint64_t) { return false; });
    }
    b.pt[cpu] = w.finish();
  }
  Analysis a = open(b);
  Profile one = decode(a, 1), two = decode(a, 2), four = decode(a, 4);
  EXPECT_EQ(one.insns, 2u * 200 * 23);
  EXPECT_EQ(one.cpu_insns.at(0), 200u * 23);
  EXPECT_EQ(one.cpu_insns.at(1), 200u * 23);
  EXPECT_EQ(one.pieces, 400u);
  for (const Profile* p : {&two, &four}) {
    EXPECT_EQ(p->insns, one.insns);
    EXPECT_EQ(p->cpu_functions, one.cpu_functions);
    EXPECT_EQ(p->edges, one.edges);
    EXPECT_EQ(p->stacks, one.stacks);
    EXPECT_EQ(p->blocks_seen, one.blocks_seen);
  }
  EXPECT_EQ(insns_of(one, a.symbols, "main_func"), 2u * 200 * 14);
  EXPECT_EQ(calls_of(one, a.symbols, "f_func"), 2u * 200 * 3);
  EXPECT_EQ(insns_of(one, a.symbols, "g_func"), 2u * 200 * 3);
}

// A PSB in the middle of f_func: the second piece starts inside a call
// whose caller it never saw. Stitched in order, the stacks are those of the
// whole trace decoded as one piece, on one thread or several.
TEST_F(DecodeTest, StacksAreStitchedAcrossPieces) {
  // xor, call f_func, nop; the ret needs the next piece, whose PSB is at f_func's ret
  Analysis a = open(two_pieces_split_in_f(kF + 1));
  for (unsigned threads : {1u, 2u}) {
    Profile p = decode(a, threads);
    EXPECT_EQ(p.pieces, 2u);
    EXPECT_TRUE(p.error_counts.empty());
    EXPECT_EQ(p.insns, 20u);
    EXPECT_EQ(folded_stacks(p, a.symbols), "main_func 14\nmain_func;f_func 6\n");
  }
}

// Task switches: B (tid 200) calls sched, which calls __switch_to_asm, on
// CPU 0; the switch's return lands in task A (tid 100), unseen before. On
// CPU 1, later, C switches to B, and B unwinds from sched. The guest's log
// says which task each switch went to.
test::SynthBundle task_switch_bundle(bool with_log) {
  using test::kText;
  test::SynthBundle b;
  std::vector<uint8_t> t(0x1000, 0xcc);
  auto put = [&](uint64_t at, std::vector<uint8_t> code) { std::copy(code.begin(), code.end(), t.begin() + static_cast<long>(at)); };
  put(0x400, {0xe8, 0xfb, 0x01, 0x00, 0x00, 0x90, 0xc3});  // a_outer: call sched; nop; ret
  put(0x480, {0xe8, 0x7b, 0x01, 0x00, 0x00, 0x90, 0xc3});  // c_outer: call sched; nop; ret
  put(0x500, {0xe8, 0x3b, 0x00, 0x00, 0x00, 0x90, 0xc3});  // b_outer: call b_inner; nop; ret
  put(0x540, {0xe8, 0xbb, 0x00, 0x00, 0x00, 0x90, 0xc3});  // b_inner: call sched; nop; ret
  put(0x600, {0xe8, 0xfb, 0x00, 0x00, 0x00, 0x90, 0xc3});  // sched: call __switch_to_asm; nop; ret
  put(0x700, {0xc3});                                      // __switch_to_asm: ret (onto the next task)
  b.text.push_back(test::text_record(TextSource::Snapshot, 0, kText, t, "core"));
  b.kallsyms =
      "ffffffff81000400 T a_outer\nffffffff81000480 T c_outer\nffffffff81000500 T b_outer\n"
      "ffffffff81000540 T b_inner\nffffffff81000600 T sched\nffffffff81000700 T __switch_to_asm\n"
      "ffffffff81000800 T end_of_text\n";
  test::PtWriter w0;
  w0.psb(1000);
  w0.pge(kText + 0x500);   // B: b_outer -> b_inner -> sched -> __switch_to_asm
  w0.tip(kText + 0x605);   // its ret: A's sched frame
  w0.tip(kText + 0x405);   // sched's ret into a_outer
  w0.pgd(test::kUserAddress);
  b.pt[0] = w0.finish();
  test::PtWriter w1;
  w1.psb(1250);
  w1.pge(kText + 0x480);   // C: c_outer -> sched -> __switch_to_asm
  w1.tip(kText + 0x605);   // its ret: B's sched frame, on this CPU
  w1.tip(kText + 0x545);   // back into b_inner
  w1.tip(kText + 0x505);   // back into b_outer
  w1.pgd(test::kUserAddress);
  b.pt[1] = w1.finish();
  if (with_log) {
    auto log = [&](uint32_t cpu, std::vector<std::pair<uint64_t, uint32_t>> switches) {
      BundleEvent e;
      e.kind = BundleEvent::Kind::TaskSwitches;
      e.kind_name = "task_switches";
      e.time = switches.front().first;
      e.cpu = cpu;
      e.switches = std::move(switches);
      b.events.push_back(e);
    };
    log(0, {{500, 200}, {1100, 100}});  // to B before the trace; B -> A
    log(1, {{600, 300}, {1300, 200}});  // to C before the trace; C -> B
  }
  return b;
}

// The stacks of task_switch_bundle when no switched-in task resumes a kept stack.
constexpr const char* kFoldedNoneResumed =
    "[base_unknown];a_outer 2\n[base_unknown];b_inner 2\n[base_unknown];b_outer 2\n"
    "[base_unknown];sched 4\n"
    "b_outer 1\nb_outer;b_inner 1\nb_outer;b_inner;sched 1\n"
    "b_outer;b_inner;sched;__switch_to_asm 1\n"
    "c_outer 1\nc_outer;sched 1\nc_outer;sched;__switch_to_asm 1\n";

TEST_F(DecodeTest, ATaskResumesTheStackItLeftOnAnotherCpu) {
  for (bool with_log : {true, false}) {
    Analysis a = open(task_switch_bundle(with_log));
    for (unsigned threads : {1u, 2u}) {
      DecodeOptions o = a.decode_options();
      o.threads = threads;
      auto p = decode_profile(a.bundle.pt, *a.image, a.symbols, o);
      ASSERT_TRUE(p) << p.error().message;
      EXPECT_TRUE(p->error_counts.empty());
      EXPECT_EQ(p->task_switches.seen, 2u);
      const std::string folded = folded_stacks(*p, a.symbols);
      if (with_log) {
        EXPECT_EQ(p->task_switches.logged, 4u);
        EXPECT_EQ(p->task_switches.matched, 2u);
        EXPECT_EQ(p->task_switches.resumed, 1u);  // B; A had not been seen to leave
        EXPECT_EQ(folded,
                  "[base_unknown];a_outer 2\n[base_unknown];sched 2\n"  // A: its frames below are unknown
                  "b_outer 3\nb_outer;b_inner 3\nb_outer;b_inner;sched 3\n"
                  "b_outer;b_inner;sched;__switch_to_asm 1\n"
                  "c_outer 1\nc_outer;sched 1\nc_outer;sched;__switch_to_asm 1\n")
            << threads << " threads";
      } else {
        EXPECT_EQ(p->task_switches.matched, 0u);
        EXPECT_EQ(folded,
                  kFoldedNoneResumed)
            << threads << " threads";
      }
    }
  }
}

// The log says CPU 1's switch brings B back, but the task that runs on
// returns into a_outer, not into B's b_inner: the record was matched to the
// wrong switch (or named the wrong task). B's kept stack does not fit the
// returns, so what runs after the switch stands on [base unknown] instead of
// on B's frames (before: b_outer;a_outer, a step no call site explains).
TEST_F(DecodeTest, AResumedStackTheReturnsDoNotFitIsNotUsed) {
  test::SynthBundle b = task_switch_bundle(true);
  test::PtWriter w1;
  w1.psb(1250);
  w1.pge(kText + 0x480);  // C: c_outer -> sched -> __switch_to_asm
  w1.tip(kText + 0x605);  // its ret: a sched frame
  w1.tip(kText + 0x405);  // ... that returns into a_outer, not b_inner
  w1.pgd(test::kUserAddress);
  b.pt[1] = w1.finish();
  Analysis a = open(b);
  auto p = decode_profile(a.bundle.pt, *a.image, a.symbols, a.decode_options());
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->task_switches.resumed, 1u);
  const std::string folded = folded_stacks(*p, a.symbols);
  // sched's nop and ret fit B's sched frame (1 + 2 instructions); a_outer's
  // nop and ret stand on [base unknown] (2 + A's own 2 on CPU 0).
  EXPECT_NE(folded.find("b_outer;b_inner;sched 3\n"), std::string::npos) << folded;
  EXPECT_NE(folded.find("[base_unknown];a_outer 4\n"), std::string::npos) << folded;
  EXPECT_EQ(folded.find("b_outer;a_outer"), std::string::npos) << folded;
  EXPECT_EQ(folded.find("b_inner;a_outer"), std::string::npos) << folded;
}

// A lost switch record on CPU 0 (perf's ring, reported at 1150): which task
// left at CPU 0's switch is unsure (the record before it may not be the one
// that switched B in), and a task a lost record named may have run since it
// left. So B's stack is not kept, and on CPU 1 it starts on [base unknown],
// as without a log; the switch still counts as matched.
TEST_F(DecodeTest, ASwitchNearALostRecordKeepsAndResumesNoStack) {
  test::SynthBundle b = task_switch_bundle(true);
  BundleEvent lost;
  lost.kind = BundleEvent::Kind::Lost;
  lost.kind_name = "lost";
  lost.lost_kind = "perf-ring";
  lost.cpu = 0;
  lost.count = 1;
  lost.time = 1150;
  b.events.push_back(lost);
  Analysis a = open(b);
  ASSERT_EQ(a.task_switches.losses.size(), 1u);
  for (unsigned threads : {1u, 2u}) {
    DecodeOptions o = a.decode_options();
    o.threads = threads;
    auto p = decode_profile(a.bundle.pt, *a.image, a.symbols, o);
    ASSERT_TRUE(p) << p.error().message;
    EXPECT_EQ(p->task_switches.matched, 2u);
    EXPECT_EQ(p->task_switches.after_loss, 1u);
    EXPECT_EQ(p->task_switches.resumed, 0u);
    EXPECT_EQ(folded_stacks(*p, a.symbols),
              kFoldedNoneResumed)
        << threads << " threads";
  }
  // A loss on the other CPU long before changes nothing on CPU 0; B's stack
  // is kept there, but the loss on CPU 1 (before C's switch to B) means
  // CPU 1's switch names its leaving task unsurely: B is not resumed.
  b.events.back().cpu = 1;
  b.events.back().time = 1200;
  Analysis a1 = open(b);
  auto p1 = decode_profile(a1.bundle.pt, *a1.image, a1.symbols, a1.decode_options());
  ASSERT_TRUE(p1) << p1.error().message;
  EXPECT_EQ(p1->task_switches.after_loss, 1u);
  EXPECT_EQ(p1->task_switches.resumed, 0u);
  // No loss: B resumes (the test above).
}

// A piece ends where the next PSB's FUP says execution was: here the PSB
// comes when f_func's nop is about to run, so the nop is the second piece's
// alone, though libipt decodes the first piece on to f_func's ret.
TEST_F(DecodeTest, APieceEndsAtTheNextPsbsFupNotAtTheNextBranch) {
  // xor, call f_func (no packet needed); the next PSB is at f_func's nop
  Analysis a = open(two_pieces_split_in_f(kF + 0));
  for (unsigned threads : {1u, 2u}) {
    Profile p = decode(a, threads);
    EXPECT_EQ(p.pieces, 2u);
    EXPECT_TRUE(p.error_counts.empty());
    EXPECT_EQ(p.insns, 20u);
    EXPECT_EQ(insns_of(p, a.symbols, "main_func"), 14u);
    EXPECT_EQ(insns_of(p, a.symbols, "f_func"), 6u);
  }
}

// Module text without a kallsyms symbol still counts for its module.
TEST_F(DecodeTest, UnnamedModuleTextCountsForItsModule) {
  constexpr uint64_t kMod = 0xffffffffc0200000ull;
  auto b = core_bundle();
  b.modules = "dummy 4096 0 - Live 0xffffffffc0200000\n";
  b.text.push_back(test::text_record(TextSource::Load, 10, kMod, {0x90, 0x90, 0xc3}, "dummy"));
  test::PtWriter w;
  w.psb(100);
  test::walk(w, {{kMod, {1, test::SimInsn::Other, 0}}, {kMod + 1, {1, test::SimInsn::Other, 0}},
                 {kMod + 2, {1, test::SimInsn::Ret, 0}}},
             kMod, [](uint64_t) { return false; });
  b.pt[0] = w.finish();
  Analysis a = open(b);
  Profile p = decode(a);
  ASSERT_EQ(p.functions.size(), 1u);
  const auto& f = a.symbols.function(p.functions.begin()->first);
  EXPECT_EQ(f.name, "[unknown]");
  EXPECT_EQ(f.module, "dummy");
  EXPECT_EQ(p.functions.begin()->second.insns, 3u);
}

TEST_F(DecodeTest, SplitAtPsbFindsEveryPieceWithItsTime) {
  test::PtWriter w;
  w.psb(7);
  test::walk(w, test::g_program(false), kG, [](uint64_t) { return false; });
  size_t second = w.size();
  w.psb(9);
  auto data = w.finish();
  auto pieces = split_at_psb(3, data);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].begin, 0u);
  EXPECT_EQ(pieces[0].end, second);
  EXPECT_EQ(pieces[0].time, 7u);
  EXPECT_EQ(pieces[1].time, 9u);
  EXPECT_EQ(pieces[1].cpu, 3u);
  EXPECT_EQ(pieces[1].end, data.size());
}

// Found by fuzz_decode_pt: a block that ends in an INT3 is a far call when
// libipt decodes it instruction by instruction, but from its block cache (a
// second decode of the same text) libipt gives no class (ptic_unknown) and
// kthost classified the bytes itself, as "other". The blocks after each INT3
// then stopped being block starts: the same trace, decoded twice in one
// process, covered 4 blocks and then 2, and the coverage fast path (which
// handed both pieces to the full decoder) disagreed with decode_profile.
TEST(DecodeCacheTest, ABlockEndingInInt3HasOneClassWhetherLibiptCachedItOrNot) {
  DecodePtFixture f;
  const std::vector<uint8_t> data = {
      0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x99,
      0x01, 0x19, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x23, 0xd1, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
      0x99, 0x01, 0x19, 0x64, 0xff, 0xff, 0xff, 0xf3, 0x00, 0x00, 0x02, 0x23, 0x99, 0x01, 0xd1, 0x08, 0x00,
      0x00, 0x81, 0xff, 0xff, 0xff, 0xff, 0xcd, 0x47, 0x00, 0x00, 0x81, 0xff, 0xff, 0xff, 0xff, 0x06, 0xcd,
      0x07, 0x00, 0x00, 0x81, 0xff, 0xff, 0xff, 0xff, 0x06, 0xcd, 0x07, 0x00, 0x81, 0x00};
  PtStreams pt;
  pt[0] = PtStream(data);
  DecodeOptions o;
  o.threads = 1;
  o.align_window = 100;
  o.cache_bits = 8;
  auto first = decode_profile(pt, f.image, f.symbols, o);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->error_counts.empty());
  // main_func+8 (a 7-byte instruction, then the INT3 at +0xf), the INT3 at
  // +0x47, inc/cmp/jne from +7, and the call at +2: 7 instructions, 4 blocks.
  const std::set<std::pair<uint32_t, uint64_t>> want = {
      {1, kDecodePtText + 0x2}, {1, kDecodePtText + 0x7}, {1, kDecodePtText + 0x8}, {1, kDecodePtText + 0x47}};
  EXPECT_EQ(first->blocks_seen, want);
  auto second = decode_profile(pt, f.image, f.symbols, o);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->blocks_seen, want) << "the second decode, from libipt's block cache";
  auto c = decode_coverage(pt, f.image, f.symbols, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(coverage_differences(*c, coverage_of(*first), f.symbols).count, 0u);
}

}  // namespace
}  // namespace kt
