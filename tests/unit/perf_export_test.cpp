// kthost export on a synthetic bundle: which records it writes, in which
// order, with which bytes (perf's own decode of a real export is checked by
// the main job, tests/tools/check-perf-export.py).
#include <gtest/gtest.h>

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

TEST(PerfExport, KsymbolsModulesAndPokesBecomeRecordsInTimeOrder) {
  std::string dir = test::make_temp_dir("export");
  test::SynthBundle b;
  b.text.push_back(test::text_record(TextSource::Snapshot, 0, test::kText, test::core_text(0x1000), "core"));
  b.kallsyms = "ffffffff81000000 T _text\nffffffff81000000 T _stext\n" + test::core_kallsyms() +
               "ffffffff81001000 T _etext\n";
  const uint64_t prog = 0xffffffffc0001000ull, tramp = 0xffffffffc0003000ull;
  b.events.push_back(test::ksymbol(1000, prog, 4, "bpf_prog_0123456789abcdef_p", false));
  b.text.push_back(test::text_record(TextSource::Load, 1000, prog, {0x90, 0x90, 0x90, 0xc3}, "bpf_prog_0123456789abcdef_p"));
  b.events.push_back(test::ksymbol(1500, tramp, 2, "bpf_trampoline_42", false));
  b.text.push_back(test::text_record(TextSource::Load, 1500, tramp, {0x90, 0xc3}, "bpf_trampoline_42"));
  b.events.push_back(test::text_poke(2000, test::kText + 0x10, {0xcc}, {0x90}));
  b.events.push_back(test::ksymbol(3000, prog, 4, "bpf_prog_0123456789abcdef_p", true));
  test::PtWriter w;
  w.psb(100);
  b.pt[0] = w.finish();
  b.write(dir + "/b");
  auto bundle = read_bundle(dir + "/b");
  ASSERT_TRUE(bundle.ok()) << bundle.error().message;
  PerfExportOptions o;
  o.out_dir = dir + "/perf";
  auto s = export_perf_data(*bundle, o);
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
