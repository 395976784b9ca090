// The bundle: round trip, crash-cut reads, and every kind of damage giving an
// error that names the file and the offset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kthost/bundle/bundle.h"
#include "kthost/common/io.h"
#include "kthost/decode/pt_packet_check.h"
#include "synthetic_bundle.h"

namespace kt {
namespace {

std::vector<uint8_t> bytes_of(const PtStream& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

class BundleTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("bundle"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/b/" + name; }
  std::vector<uint8_t> trace(int runs) const {
    test::PtWriter w;
    for (int i = 0; i < runs; ++i) {
      w.psb(100 + i);
      test::walk(w, test::g_program(false), test::kG, [](uint64_t) { return false; });
    }
    return w.finish();
  }
  std::unique_ptr<BundleWriter> writer() {
    auto w = BundleWriter::create(dir_ + "/b", {0, 1}, BundleClock{});
    EXPECT_TRUE(w.ok());
    return std::move(*w);
  }
  void corrupt(const std::string& name, uint64_t offset, uint8_t value) {
    std::fstream f(path(name), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(value));
  }
  std::string error_of(const BundleReadOptions& o = {}) {
    auto b = read_bundle(dir_ + "/b", o);
    EXPECT_FALSE(b.ok());
    return b.ok() ? "" : b.error().message;
  }
  std::string dir_;
};

TEST_F(BundleTest, RoundTrip) {
  auto w = writer();
  auto pt = trace(3);
  ASSERT_TRUE(w->append_pt(0, pt.data(), pt.size()));
  ASSERT_TRUE(w->append_event_json(event_to_json(test::ksymbol(5, 0xffffffffc0000000ull, 16, "bpf_prog_x", false))));
  ASSERT_TRUE(w->append_event_json(event_to_json(test::text_poke(6, 0xffffffff81000200ull, test::kGOld, test::kGNew))));
  ASSERT_TRUE(w->append_text(test::text_record(TextSource::Snapshot, 0, test::kText, test::core_text(0x1000))));
  ASSERT_TRUE(w->write_whole_file("kallsyms", test::core_kallsyms()));
  w->set_loss("pt_overflow", 2);
  ASSERT_TRUE(w->close());
  auto b = read_bundle(dir_ + "/b");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_TRUE(b->manifest.complete);
  EXPECT_EQ(b->manifest.cpus, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(bytes_of(b->pt.at(0)), pt);
  EXPECT_TRUE(b->pt.at(1).empty());
  ASSERT_EQ(b->events.size(), 2u);
  EXPECT_EQ(b->events[0].kind, BundleEvent::Kind::KsymbolRegister);
  EXPECT_EQ(b->events[0].name, "bpf_prog_x");
  EXPECT_EQ(b->events[1].kind, BundleEvent::Kind::TextPoke);
  EXPECT_EQ(b->events[1].new_bytes, test::kGNew);
  ASSERT_EQ(b->text.records.size(), 1u);
  EXPECT_EQ(b->text.records[0].bytes, test::core_text(0x1000));
  EXPECT_EQ(b->kallsyms, test::core_kallsyms());
  EXPECT_EQ(b->losses.at("pt_overflow"), 2u);
  EXPECT_EQ(b->ignored_bytes, 0u);
}

// A writer killed after a flush: what it appended later is on disk (its
// buffers were written when full) but not committed: the reader stops at the flush.
TEST_F(BundleTest, CrashCutBundleReadsUpToItsLastFlush) {
  auto w = writer();
  auto first = trace(2);
  ASSERT_TRUE(w->append_pt(0, first.data(), first.size()));
  ASSERT_TRUE(w->append_event_json(event_to_json(test::ksymbol(5, 0x1000, 16, "a", false))));
  ASSERT_TRUE(w->flush());
  // More than the 1 MiB buffer, so part of it reaches the file before the "crash".
  auto more = trace(40000);
  ASSERT_GT(more.size(), 1u << 20);
  ASSERT_TRUE(w->append_pt(0, more.data(), more.size()));
  ASSERT_TRUE(w->append_event_json(event_to_json(test::ksymbol(6, 0x2000, 16, "b", false))));
  ASSERT_GT(std::filesystem::file_size(path("pt/cpu0.pt")), first.size());
  // Crash: nothing else is written (the writer is destroyed only after the
  // read, without a flush, so that LeakSanitizer sees no leak).
  std::unique_ptr<BundleWriter> crashed(w.release());
  auto b = read_bundle(dir_ + "/b");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_FALSE(b->manifest.complete);
  EXPECT_EQ(bytes_of(b->pt.at(0)), first);
  EXPECT_EQ(b->events.size(), 1u);
  EXPECT_GT(b->ignored_bytes, 0u);
}

TEST_F(BundleTest, TruncatedFileNamesFileAndOffset) {
  auto w = writer();
  auto pt = trace(3);
  ASSERT_TRUE(w->append_pt(0, pt.data(), pt.size()));
  ASSERT_TRUE(w->close());
  std::filesystem::resize_file(path("pt/cpu0.pt"), 10);
  std::string e = error_of();
  EXPECT_NE(e.find("pt/cpu0.pt"), std::string::npos) << e;
  EXPECT_NE(e.find("at offset 10"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(BundleTest, CorruptPtIsACrcErrorAndABadPacketAtItsOffset) {
  auto w = writer();
  auto pt = trace(3);
  ASSERT_TRUE(w->append_pt(0, pt.data(), pt.size()));
  ASSERT_TRUE(w->close());
  size_t at = 16 + 2 + 8 + 2;  // the first packet after PSB, MODE, TSC, PSBEND
  corrupt("pt/cpu0.pt", at, 0x02);  // an extended opcode...
  corrupt("pt/cpu0.pt", at + 1, 0x01);  // ...that does not exist
  std::string e = error_of();
  EXPECT_NE(e.find("pt/cpu0.pt"), std::string::npos) << e;
  EXPECT_NE(e.find("CRC-32C"), std::string::npos) << e;
  BundleReadOptions no_crc;
  no_crc.check_crc = false;
  EXPECT_TRUE(read_bundle(dir_ + "/b", no_crc).ok()) << "without a PT check, kt_bundle reads packets as bytes";
  no_crc.check_pt = check_pt_packets;
  e = error_of(no_crc);
  EXPECT_NE(e.find("pt/cpu0.pt: at offset 28: "), std::string::npos) << e;
  EXPECT_NE(e.find("bad PT packet"), std::string::npos) << e;
}

TEST_F(BundleTest, BadEventLineNamesLineAndOffset) {
  auto w = writer();
  std::string first = event_to_json(test::ksymbol(5, 0x1000, 16, "a", false));
  ASSERT_TRUE(w->append_event_json(first));
  ASSERT_TRUE(w->append_event_json("{\"kind\":\"ksymbol\",\"time\":7}"));
  ASSERT_TRUE(w->close());
  std::string e = error_of();
  EXPECT_NE(e.find("events.jsonl: line 2 at offset " + std::to_string(first.size() + 1)), std::string::npos) << e;
}

TEST(BundleEvents, TaskSwitchesRoundTripAndBadOnesAreNamed) {
  BundleEvent e;
  e.kind = BundleEvent::Kind::TaskSwitches;
  e.kind_name = "task_switches";
  e.time = 100;
  e.cpu = 1;
  e.switches = {{100, 7}, {250, 0}, {900, 4294967295u}};
  auto back = parse_events_jsonl(event_to_json(e) + "\n", "E");
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].kind, BundleEvent::Kind::TaskSwitches);
  EXPECT_EQ((*back)[0].cpu, 1u);
  EXPECT_EQ((*back)[0].switches, e.switches);
  for (const char* bad : {R"({"kind":"task_switches","time":1,"cpu":0,"switches":[[1,2],[3]]})",
                          R"({"kind":"task_switches","time":1,"cpu":0,"switches":[[1,4294967296]]})",
                          R"({"kind":"task_switches","time":1,"switches":[[1,2]]})",
                          R"({"kind":"task_switches","time":1,"cpu":0})"}) {
    auto r = parse_events_jsonl(std::string(bad) + "\n", "E");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("task_switches"), std::string::npos) << r.error().message;
  }
  std::string many = R"({"kind":"task_switches","time":1,"cpu":0,"switches":[)";
  for (int i = 0; i < 513; ++i) many += std::string(i ? "," : "") + "[1,2]";
  auto r = parse_events_jsonl(many + "]}\n", "E");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("more than the 512"), std::string::npos) << r.error().message;
}

TEST_F(BundleTest, CorruptTextStoreNamesOffset) {
  auto w = writer();
  ASSERT_TRUE(w->append_text(test::text_record(TextSource::Load, 5, 0x1000, {1, 2, 3})));
  ASSERT_TRUE(w->close());
  corrupt("text.kts", kTextStoreHeaderSize + kTextRecordFixedSize + 1, 0xff);
  std::string e = error_of();
  EXPECT_NE(e.find("text.kts"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 16"), std::string::npos) << e;
}

TEST_F(BundleTest, ManifestIsValidated) {
  auto w = writer();
  ASSERT_TRUE(w->close());
  auto bad = [&](const std::string& text, const std::string& expect) {
    ASSERT_TRUE(write_file_atomic(path("manifest.json"), text));
    std::string e = error_of();
    EXPECT_NE(e.find("manifest.json"), std::string::npos) << e;
    EXPECT_NE(e.find(expect), std::string::npos) << e;
  };
  bad("{", "not valid JSON");
  bad(R"({"format":"other"})", "format");
  bad(R"({"format":"kthost-bundle","version":1,"clock":{"perf_to_tsc":"identity"},"cpus":[0],"flush_seq":1,
         "files":{"../etc/passwd":{"size":1}}})",
      "leaves the bundle");
  bad(R"({"format":"kthost-bundle","version":1,"clock":{"perf_to_tsc":"identity"},"cpus":[3],"flush_seq":1,
         "files":{}})",
      "CPU 3 has no pt/cpu3.pt");
  bad(R"({"format":"kthost-bundle","version":1,"clock":{"perf_to_tsc":{"time_zero":1,"time_mult":0,"time_shift":2}},
         "cpus":[],"flush_seq":1,"files":{}})",
      "perf_to_tsc");
  std::filesystem::remove(path("manifest.json"));
  EXPECT_NE(error_of().find("has no manifest.json"), std::string::npos);
}

// A trace that ended before the guest sent its clock writes "unknown"; it
// reads back (sideband times then map to 0), and round-trips.
TEST(BundleManifest, UnknownClockRoundTrips) {
  BundleManifest m;
  m.clock.identity = false;  // and time_mult 0: no guest clock yet
  std::string text = manifest_to_json(m);
  EXPECT_NE(text.find("\"perf_to_tsc\": \"unknown\""), std::string::npos) << text;
  auto back = parse_manifest(text, "manifest.json");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_FALSE(back->clock.identity);
  EXPECT_EQ(back->clock.time_mult, 0u);
  EXPECT_EQ(back->clock.to_pt(123456), 0u);
  auto bad = parse_manifest(R"({"format":"kthost-bundle","version":1,"clock":{"perf_to_tsc":"sundial"},
         "cpus":[],"flush_seq":1,"files":{}})", "manifest.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("perf_to_tsc"), std::string::npos);
}

// A manifest read back from disk is untrusted: a field of the wrong JSON type
// is an error naming the field, never an exception (fuzz_bundle found
// "format": 0 aborting the reader).
TEST(BundleManifest, FieldsOfTheWrongTypeAreErrors) {
  for (const char* format : {"0", "[]", "{}", "null", "\"kthost\""}) {
    std::string text = std::string(R"({"format":)") + format +
                       R"(,"version":1,"clock":{"perf_to_tsc":"identity"},"cpus":[],"flush_seq":1,"files":{}})";
    auto m = parse_manifest(text, "manifest.json");
    ASSERT_FALSE(m) << text;
    EXPECT_NE(m.error().message.find("manifest.json: format"), std::string::npos) << m.error().message;
  }
}

TEST_F(BundleTest, MissingListedFile) {
  auto w = writer();
  ASSERT_TRUE(w->close());
  std::filesystem::remove(path("events.jsonl"));
  std::string e = error_of();
  EXPECT_NE(e.find("events.jsonl: listed in manifest.json but missing"), std::string::npos) << e;
}

TEST_F(BundleTest, ClockConvertsPerfTimeToTsc) {
  BundleClock c;
  EXPECT_EQ(c.to_pt(1234), 1234u);
  c = {false, 1000, 1u << 10, 10};  // mult/2^shift = 1: tsc = time - zero
  EXPECT_EQ(c.to_pt(5000), 4000u);
  // The kernel's time_zero is often "negative": the arithmetic wraps.
  c = {false, ~uint64_t{0} - 999, 1u << 10, 10};  // time_zero = -1000
  EXPECT_EQ(c.to_pt(5000), 6000u);
  c.pt_offset = -100;  // PT time = guest TSC + pt_offset
  EXPECT_EQ(c.to_pt(5000), 5900u);
}

}  // namespace
}  // namespace kt
