#include "kthost/textstore/text_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "kthost/common/io.h"

namespace kt {
namespace {

TextRecord record(uint64_t start, size_t len, uint8_t fill, TextSource src, std::string name = "") {
  TextRecord r;
  r.time = 1000 + start;
  r.start = start;
  r.source = src;
  r.kind = 5;
  r.id = start / 16;
  r.name = std::move(name);
  r.bytes.assign(len, fill);
  for (size_t i = 0; i < len; ++i) r.bytes[i] = static_cast<uint8_t>(fill + i);
  return r;
}

std::string temp_path() {
  char tmpl[] = "/tmp/kthost-textstore-XXXXXX";
  int fd = ::mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  ::close(fd);
  return tmpl;
}

TEST(TextStore, WritesAndReadsBackEveryField) {
  std::string path = temp_path();
  {
    auto w = TextStoreWriter::create(path);
    ASSERT_TRUE(w) << w.error().message;
    ASSERT_TRUE(w->append(record(0xffffffffc0001000, 300, 0x10, TextSource::Guard, "bpf_prog_x")));
    ASSERT_TRUE(w->append(record(0xffffffffc0002000, 0, 0, TextSource::Load)));
    ASSERT_TRUE(w->append(record(0xffffffff81000000, 4096, 0x90, TextSource::Snapshot, "vmlinux")));
    EXPECT_EQ(w->records(), 3u);
    EXPECT_EQ(w->text_bytes(), 4396u);
  }
  auto c = read_text_store(path);
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_EQ(c->records.size(), 3u);
  EXPECT_EQ(c->ignored_tail, 0u);
  const auto& r = c->records[0];
  EXPECT_EQ(r.start, 0xffffffffc0001000u);
  EXPECT_EQ(r.time, 1000 + 0xffffffffc0001000u);
  EXPECT_EQ(r.source, TextSource::Guard);
  EXPECT_EQ(r.kind, 5);
  EXPECT_EQ(r.id, 0xffffffffc0001000u / 16);
  EXPECT_EQ(r.name, "bpf_prog_x");
  EXPECT_EQ(r.bytes, record(0xffffffffc0001000, 300, 0x10, TextSource::Guard).bytes);
  EXPECT_TRUE(c->records[1].bytes.empty());
  EXPECT_EQ(c->records[2].bytes.size(), 4096u);
  ::unlink(path.c_str());
}

TEST(TextStore, RefusesOversizedRecordsWhenWriting) {
  std::string path = temp_path();
  auto w = TextStoreWriter::create(path);
  ASSERT_TRUE(w);
  TextRecord r = record(0x1000, 1, 0, TextSource::Load);
  r.name.assign(kTextStoreMaxName + 1, 'a');
  auto st = w->append(r);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::InvalidArgument);
  ::unlink(path.c_str());
}

std::vector<uint8_t> store_bytes(const std::vector<TextRecord>& records) {
  std::vector<uint8_t> v = {'K', 'T', 'T', 'E', 'X', 'T', 0, 1, 1, 0, 0, 0, 0, 0, 0, 0};
  for (const auto& r : records) {
    auto e = encode_text_record(r);
    v.insert(v.end(), e.begin(), e.end());
  }
  return v;
}

TEST(TextStore, AWriterCutShortReadsBackUpToTheLastWholeRecord) {
  auto full = store_bytes({record(0x1000, 64, 1, TextSource::Guard), record(0x2000, 64, 2, TextSource::Guard)});
  size_t first_end = kTextStoreHeaderSize + kTextRecordFixedSize + 64 + 4;
  for (size_t cut = first_end; cut < full.size(); ++cut) {
    auto c = parse_text_store(full.data(), cut, "t.kts");
    ASSERT_TRUE(c) << "cut at " << cut << ": " << c.error().message;
    EXPECT_EQ(c->records.size(), 1u);
    EXPECT_EQ(c->valid_bytes, first_end);
    EXPECT_EQ(c->ignored_tail, cut - first_end);
  }
  auto whole = parse_text_store(full.data(), full.size(), "t.kts");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->records.size(), 2u);
}

TEST(TextStore, CorruptionIsAnErrorNamingFileAndOffset) {
  auto good = store_bytes({record(0x1000, 64, 1, TextSource::Guard), record(0x2000, 64, 2, TextSource::Guard)});
  size_t second = kTextStoreHeaderSize + kTextRecordFixedSize + 64 + 4;
  struct Case {
    size_t offset;
    uint8_t value;
    std::string expect;
  } cases[] = {
      {0, 'X', "offset 0: not a kthost text store"},
      {8, 2, "offset 8: text store version 2"},
      {second, 0, "offset " + std::to_string(second) + ": no record magic"},
      {second + 4, 0xff, "record length"},
      {second + 24 + 3, 0x7f, "text length"},
      {second + 41, 0xff, "name length"},
      {second + 43, 0x13, "offset " + std::to_string(second + 42) + ": reserved field is not zero"},
      {second + 50, 0xAA, "offset " + std::to_string(second) + ": record checksum mismatch"},
  };
  for (const auto& c : cases) {
    auto bad = good;
    bad[c.offset] = c.value;
    auto r = parse_text_store(bad.data(), bad.size(), "dir/text.kts");
    ASSERT_FALSE(r) << "byte " << c.offset;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidInput);
    EXPECT_NE(r.error().message.find("dir/text.kts"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << r.error().message;
  }
}

TEST(TextStore, UnknownSourceAndTotalLimitAreRefused) {
  TextRecord r = record(0x1000, 64, 1, TextSource::Guard);
  r.source = static_cast<TextSource>(9);
  auto v = store_bytes({r});
  auto c = parse_text_store(v.data(), v.size(), "t");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("unknown text source 9"), std::string::npos);
  auto two = store_bytes({record(0x1000, 64, 1, TextSource::Guard), record(0x2000, 64, 2, TextSource::Guard)});
  auto limited = parse_text_store(two.data(), two.size(), "t", 100);
  ASSERT_FALSE(limited);
  EXPECT_EQ(limited.error().code, ErrorCode::LimitExceeded);
}

TEST(TextStore, ShortOrEmptyFilesAreClear) {
  auto c = parse_text_store(nullptr, 0, "empty.kts");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("shorter than the 16-byte header"), std::string::npos);
  auto header_only = store_bytes({});
  auto h = parse_text_store(header_only.data(), header_only.size(), "h");
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->records.empty());
  auto missing = read_text_store("/nonexistent/text.kts");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("/nonexistent/text.kts"), std::string::npos);
}

}  // namespace
}  // namespace kt
