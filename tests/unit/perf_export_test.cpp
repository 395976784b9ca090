// kthost export on a synthetic bundle: which records it writes, in which
// order, with which bytes (perf's own decode of a real export is checked by
// the main job, tests/tools/check-perf-export.py).
#include <gtest/gtest.h>

#include <elf.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>

#include "kthost/bundle/bundle.h"
#include "kthost/common/io.h"
#include "kthost/perfdata/export.h"
#include "kthost/perfdata/perf_data.h"
#include "synthetic_bundle.h"
#include "synthetic_pt.h"

namespace kt {
namespace {

struct Record {
  uint32_t type;
  uint16_t misc;
  std::string body;  // after the 8-byte header
};

template <typename T>
T at(const std::string& s, size_t off) {
  T v{};
  std::memcpy(&v, s.data() + off, sizeof v);
  return v;
}

std::vector<Record> records_of(const std::string& file) {
  std::vector<Record> out;
  uint64_t off = at<uint64_t>(file, 40), end = off + at<uint64_t>(file, 48);
  while (off + 8 <= end) {
    Record r{at<uint32_t>(file, off), at<uint16_t>(file, off + 4), {}};
    uint16_t size = at<uint16_t>(file, off + 6);
    r.body = file.substr(off + 8, size - 8);
    uint64_t next = off + size;
    if (r.type == perf::kRecordAuxtrace) next += at<uint64_t>(r.body, 0);  // its data follows
    out.push_back(std::move(r));
    off = next;
  }
  return out;
}

// A bundle with a small core kernel (text and kallsyms) and one PSB of PT.
test::SynthBundle small_kernel_bundle() {
  test::SynthBundle b;
  b.text.push_back(test::text_record(TextSource::Snapshot, 0, test::kText, test::core_text(0x1000), "core"));
  b.kallsyms = "ffffffff81000000 T _text\nffffffff81000000 T _stext\n" + test::core_kallsyms() +
               "ffffffff81001000 T _etext\n";
  test::PtWriter w;
  w.psb(100);
  b.pt[0] = w.finish();
  return b;
}

// Writes the bundle to DIR/b and exports it to DIR/perf.
Result<PerfExportSummary> write_and_export(const test::SynthBundle& b, const std::string& dir) {
  b.write(dir + "/b");
  auto bundle = read_bundle(dir + "/b");
  if (!bundle) return bundle.take_error();
  PerfExportOptions o;
  o.out_dir = dir + "/perf";
  return export_perf_data(*bundle, o);
}

TEST(PerfExport, KsymbolsModulesAndPokesBecomeRecordsInTimeOrder) {
  std::string dir = test::make_temp_dir("export");
  test::SynthBundle b = small_kernel_bundle();
  const uint64_t prog = 0xffffffffc0001000ull, tramp = 0xffffffffc0003000ull;
  b.events.push_back(test::ksymbol(1000, prog, 4, "bpf_prog_0123456789abcdef_p", false));
  b.text.push_back(test::text_record(TextSource::Load, 1000, prog, {0x90, 0x90, 0x90, 0xc3}, "bpf_prog_0123456789abcdef_p"));
  b.events.push_back(test::ksymbol(1500, tramp, 2, "bpf_trampoline_42", false));
  b.text.push_back(test::text_record(TextSource::Load, 1500, tramp, {0x90, 0xc3}, "bpf_trampoline_42"));
  b.events.push_back(test::text_poke(2000, test::kText + 0x10, {0xcc}, {0x90}));
  b.events.push_back(test::ksymbol(3000, prog, 4, "bpf_prog_0123456789abcdef_p", true));
  auto s = write_and_export(b, dir);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->ksymbols, 1u);    // the trampoline is not a KSYMBOL
  EXPECT_EQ(s->text_pokes, 1u);
  EXPECT_EQ(s->load_pokes, 2u);  // the program's text and the trampoline's
  EXPECT_TRUE(std::filesystem::exists(dir + "/perf/kcore_dir/kcore"));
  auto kallsyms = read_file(dir + "/perf/kcore_dir/kallsyms");
  ASSERT_TRUE(kallsyms.ok());
  EXPECT_NE(kallsyms->find("ffffffffc0003000 t bpf_trampoline_42\t[bpf]"), std::string::npos);

  auto file = read_file(dir + "/perf/data", 1u << 20);
  ASSERT_TRUE(file.ok());
  std::vector<uint32_t> types;
  const Record* poke_of_prog = nullptr;
  const Record* guest_poke = nullptr;
  const std::vector<Record> records = records_of(*file);
  for (const auto& r : records) {
    types.push_back(r.type);
    if (r.type == PERF_RECORD_TEXT_POKE && at<uint64_t>(r.body, 0) == prog) poke_of_prog = &r;
    if (r.type == PERF_RECORD_TEXT_POKE && at<uint64_t>(r.body, 0) == test::kText + 0x10) guest_poke = &r;
  }
  std::vector<uint32_t> want = {perf::kRecordAuxtraceInfo, PERF_RECORD_MMAP,
                                PERF_RECORD_KSYMBOL,       PERF_RECORD_TEXT_POKE,  // the program, its text
                                PERF_RECORD_TEXT_POKE,                             // the trampoline's text
                                PERF_RECORD_TEXT_POKE,                             // the guest's poke
                                PERF_RECORD_KSYMBOL,                               // the unregister
                                perf::kRecordFinishedRound, perf::kRecordAuxtrace, perf::kRecordFinishedRound};
  EXPECT_EQ(types, want);
  ASSERT_NE(poke_of_prog, nullptr);
  EXPECT_EQ(at<uint16_t>(poke_of_prog->body, 8), 0u);   // no old bytes
  EXPECT_EQ(at<uint16_t>(poke_of_prog->body, 10), 4u);  // the program's 4 bytes
  EXPECT_EQ(poke_of_prog->body.substr(12, 4), std::string("\x90\x90\x90\xc3", 4));
  ASSERT_NE(guest_poke, nullptr);
  EXPECT_EQ(guest_poke->body.substr(8, 6), std::string("\x01\x00\x01\x00\xcc\x90", 6));  // old 1, new 1, cc -> 90
  EXPECT_EQ(guest_poke->misc, PERF_RECORD_MISC_KERNEL);  // perf applies kernel pokes only
  std::filesystem::remove_all(dir);
}

// Which features the file's header marks (bit i of the 256-bit map at 72).
bool has_feature(const std::string& file, unsigned bit) { return (at<uint8_t>(file, 72 + bit / 8) >> (bit % 8)) & 1; }

TEST(PerfExport, ASingleFunctionBpfProgramIsSentAsPerfRecordSendsIt) {
  std::string dir = test::make_temp_dir("export");
  test::SynthBundle b = small_kernel_bundle();
  // The program pack page was in the initial snapshot: perf must not find
  // the program's address in a kcore map (it would give the whole kcore the
  // program's info).
  const uint64_t pack = 0xffffffffc0000000ull, prog = pack + 0x1000, two = pack + 0x2000;
  b.text.push_back(test::text_record(TextSource::Snapshot, 0, pack, std::vector<uint8_t>(0x3000, 0xcc), "pack"));
  const std::array<uint8_t, 8> tag = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  b.events.push_back(test::ksymbol(1000, prog, 4, "bpf_prog_0123456789abcdef_p", false));
  b.events.push_back(test::bpf_event(1001, 7, tag, true));
  b.text.push_back(test::text_record(TextSource::Load, 1000, prog, {0x90, 0x90, 0x90, 0xc3}, "bpf_prog_0123456789abcdef_p"));
  // A program with two functions stays an out-of-line ksymbol (perf would
  // read the second one's text from the first's start).
  const std::array<uint8_t, 8> tag2 = {0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};
  b.events.push_back(test::ksymbol(1100, two, 2, "bpf_prog_fedcba9876543210_q", false));
  b.events.push_back(test::ksymbol(1100, two + 2, 2, "bpf_prog_1111111111111111_F", false));
  b.events.push_back(test::bpf_event(1101, 8, tag2, true));
  b.text.push_back(test::text_record(TextSource::Load, 1100, two, {0x90, 0xc3}, "bpf_prog_fedcba9876543210_q"));
  b.text.push_back(test::text_record(TextSource::Load, 1100, two + 2, {0x90, 0xc3}, "bpf_prog_1111111111111111_F"));
  b.events.push_back(test::ksymbol(3000, prog, 4, "bpf_prog_0123456789abcdef_p", true));
  b.events.push_back(test::bpf_event(3001, 7, tag, false));
  auto s = write_and_export(b, dir);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->bpf_programs, 1u);
  EXPECT_EQ(s->bpf_events, 2u);
  EXPECT_EQ(s->ksymbols, 3u);
  EXPECT_EQ(s->load_pokes, 2u);  // the two-function program's functions, as TEXT_POKEs

  auto file = read_file(dir + "/perf/data", 1u << 20);
  ASSERT_TRUE(file.ok());
  std::vector<std::pair<uint32_t, uint16_t>> ksyms;  // (addr low bits, type | unregister << 8)
  std::vector<std::string> bpf_events;
  for (const auto& r : records_of(*file)) {
    if (r.type == PERF_RECORD_KSYMBOL)
      ksyms.push_back({static_cast<uint32_t>(at<uint64_t>(r.body, 0) - pack),
                       static_cast<uint16_t>(at<uint16_t>(r.body, 12) | at<uint16_t>(r.body, 14) << 8)});
    if (r.type == PERF_RECORD_BPF_EVENT) bpf_events.push_back(r.body.substr(0, 16));
  }
  using P = std::pair<uint32_t, uint16_t>;
  EXPECT_EQ(ksyms, (std::vector<P>{{0x1000, PERF_RECORD_KSYMBOL_TYPE_BPF},
                                    {0x2000, PERF_RECORD_KSYMBOL_TYPE_OOL},
                                    {0x2002, PERF_RECORD_KSYMBOL_TYPE_OOL},
                                    {0x1000, PERF_RECORD_KSYMBOL_TYPE_BPF | PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER << 8}}));
  // u16 type, u16 flags, u32 id, u8 tag[8]
  ASSERT_EQ(bpf_events.size(), 2u);
  EXPECT_EQ(bpf_events[0], std::string("\x01\x00\x00\x00\x07\x00\x00\x00\x01\x23\x45\x67\x89\xab\xcd\xef", 16));
  EXPECT_EQ(bpf_events[1].substr(0, 2), std::string("\x02\x00", 2));
  EXPECT_TRUE(has_feature(*file, perf::kFeatBpfProgInfo));

  // The kcore: the pack page with a hole where the program is.
  auto kcore = read_file(dir + "/perf/kcore_dir/kcore", 1u << 20);
  ASSERT_TRUE(kcore.ok());
  uint16_t phnum = at<uint16_t>(*kcore, 56);
  uint64_t phoff = at<uint64_t>(*kcore, 32);
  bool covers_prog = false, covers_pack = false;
  for (uint16_t i = 0; i < phnum; ++i) {
    uint64_t vaddr = at<uint64_t>(*kcore, phoff + i * 56 + 16), size = at<uint64_t>(*kcore, phoff + i * 56 + 32);
    if (at<uint32_t>(*kcore, phoff + i * 56) != PT_LOAD) continue;
    covers_prog |= vaddr < prog + 4 && prog < vaddr + size;
    covers_pack |= vaddr == pack;
  }
  EXPECT_FALSE(covers_prog);
  EXPECT_TRUE(covers_pack);
  std::filesystem::remove_all(dir);
}

TEST(PerfExport, HardwareAuxLossesBecomePerfRecordAuxFlagsOnTheirVcpu) {
  std::string dir = test::make_temp_dir("export");
  test::SynthBundle b = small_kernel_bundle();
  b.pt[1] = b.pt[0];
  b.losses = {{"aux_truncated_cpu1", 2}, {"aux_partial_cpu0", 1}, {"aux_collision_cpu0", 0}, {"guard_miss", 3}};
  auto s = write_and_export(b, dir);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->aux_flag_records, 3u);
  auto file = read_file(dir + "/perf/data", 1u << 20);
  ASSERT_TRUE(file.ok());
  std::vector<std::pair<uint64_t, uint32_t>> aux;  // (flags, cpu from the sample id)
  for (const auto& r : records_of(*file))
    if (r.type == PERF_RECORD_AUX) {
      EXPECT_EQ(at<uint64_t>(r.body, 0), b.pt[0].size());  // at the end of the vCPU's trace
      EXPECT_EQ(at<uint64_t>(r.body, 8), 0u);
      // sample_id: pid, tid, time, cpu, res, id
      aux.push_back({at<uint64_t>(r.body, 16), at<uint32_t>(r.body, 24 + 16)});
    }
  using P = std::pair<uint64_t, uint32_t>;
  std::sort(aux.begin(), aux.end());
  EXPECT_EQ(aux, (std::vector<P>{{PERF_AUX_FLAG_TRUNCATED, 1}, {PERF_AUX_FLAG_TRUNCATED, 1}, {PERF_AUX_FLAG_PARTIAL, 0}}));
  // The guard's miss has no perf record: it is in a note; the AUX ones are not.
  std::string notes;
  for (const auto& n : s->notes) notes += n.text + "\n";
  EXPECT_NE(notes.find("guard_miss = 3"), std::string::npos) << notes;
  EXPECT_EQ(notes.find("aux_"), std::string::npos) << notes;
  std::filesystem::remove_all(dir);
}

TEST(PerfExport, ANoteAboutTextCountsTheInstructionsOfFunctionsStartingThere) {
  Symbolizer symbols;
  ASSERT_TRUE(symbols.add_kallsyms("ffffffff81000000 T a\nffffffff81000100 T b\nffffffff81000200 T c\n", "").ok());
  symbols.finalize();
  Profile profile;
  for (uint64_t ip : {0xffffffff81000010ull, 0xffffffff81000110ull, 0xffffffff81000210ull})
    profile.functions[symbols.lookup(ip, 0)].insns = ip & 0xfff;  // 0x10, 0x110, 0x210
  std::vector<ExportNote> notes = {{"b and c", 0xffffffff81000100ull, 0xffffffff81000300ull},
                                   {"inside a, after its start", 0xffffffff81000001ull, 0xffffffff81000100ull},
                                   {"no range"}};
  count_note_instructions(notes, profile, symbols);
  EXPECT_EQ(notes[0].insns, std::optional<uint64_t>(0x110 + 0x210));
  EXPECT_EQ(notes[1].insns, std::optional<uint64_t>(0));
  EXPECT_FALSE(notes[2].insns.has_value());
}

TEST(PerfExport, ABundleWithoutKallsymsOrClockIsRefusedWithTheReason) {
  std::string dir = test::make_temp_dir("export");
  test::SynthBundle b;
  test::PtWriter w;
  w.psb(100);
  b.pt[0] = w.finish();
  b.write(dir + "/b");
  auto bundle = read_bundle(dir + "/b");
  ASSERT_TRUE(bundle.ok());
  PerfExportOptions o;
  o.out_dir = dir + "/perf";
  auto s = export_perf_data(*bundle, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("kallsyms"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kt
