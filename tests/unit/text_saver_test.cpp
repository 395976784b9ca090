// TextSaver against page tables and text built in a BufferMemory.
#include "kthost/capture/text_saver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "kthost/introspect/guest_memory.h"

namespace kt {
namespace {

constexpr uint64_t kBase = 0xffffffffc0000000ull;  // like module/BPF text
constexpr uint64_t kTextPhys = 0x200000;           // 16 pages of "text"

// 4-level tables mapping kBase + i*4K -> kTextPhys + i*4K for i < 16.
struct Guest {
  BufferMemory mem{4u << 20};
  PagingConfig cfg;
  Guest() {
    uint64_t pml4 = 0x100000, pdpt = 0x101000, pd = 0x102000, pt = 0x103000;
    auto idx = [](uint64_t va, int shift) { return (va >> shift) & 511; };
    mem.write_u64(pml4 + idx(kBase, 39) * 8, pdpt | 3);
    mem.write_u64(pdpt + idx(kBase, 30) * 8, pd | 3);
    mem.write_u64(pd + idx(kBase, 21) * 8, pt | 3);
    for (uint64_t i = 0; i < 16; ++i) mem.write_u64(pt + (idx(kBase, 12) + i) * 8, (kTextPhys + i * 4096) | 1);
    for (uint64_t i = 0; i < 16 * 4096; ++i) {
      uint8_t b = static_cast<uint8_t>(i * 7 + 3);
      mem.write(kTextPhys + i, &b, 1);
    }
    cfg = {PagingMode::Level4, pml4, 52};
  }
  void unmap(uint64_t va) { mem.write_u64(0x103000 + ((va >> 12) & 511) * 8, 0); }
  void fill(uint64_t va, size_t len, uint8_t v) {
    std::vector<uint8_t> b(len, v);
    mem.write(kTextPhys + (va - kBase), b.data(), len);
  }
  std::vector<uint8_t> bytes(uint64_t va, size_t len) {
    std::vector<uint8_t> b(len);
    EXPECT_TRUE(mem.read(kTextPhys + (va - kBase), b.data(), len));
    return b;
  }
};

SidebandEvent at(uint64_t time, EventBody body) {
  SidebandEvent ev;
  ev.time = time;
  ev.cpu = 1;
  ev.body = std::move(body);
  return ev;
}
KsymbolEvent ksym(uint64_t addr, uint32_t len, bool unregister, std::string name) {
  return KsymbolEvent{addr, len, 1, unregister, std::move(name)};
}

class TextSaverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kthost-saver-XXXXXX";
    int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
    auto w = TextStoreWriter::create(path_);
    ASSERT_TRUE(w);
    store_.emplace(std::move(*w));
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  std::vector<TextRecord> records() {
    EXPECT_TRUE(store_->flush());
    auto c = read_text_store(path_);
    EXPECT_TRUE(c) << c.error().message;
    return c ? c->records : std::vector<TextRecord>{};
  }
  Guest g_;
  PageWalker walker_{g_.mem, g_.cfg};
  std::string path_;
  std::optional<TextStoreWriter> store_;
};

TEST_F(TextSaverTest, GuardNoticeCopiesTheRangeAcrossPages) {
  TextSaver saver(walker_, *store_, true);
  uint64_t start = kBase + 4096 - 100, end = start + 300;
  auto expect = g_.bytes(start, 300);
  HoldRecord h = saver.on_guard_notice(at(500, {}), GuardNoticeEvent{7, start, end, 1});
  EXPECT_EQ(h.status, 0u) << h.error;
  EXPECT_EQ(h.id, 7u);
  auto recs = records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].source, TextSource::Guard);
  EXPECT_EQ(recs[0].start, start);
  EXPECT_EQ(recs[0].time, 500u);
  EXPECT_EQ(recs[0].id, 7u);
  EXPECT_EQ(recs[0].kind, 1);
  EXPECT_EQ(recs[0].bytes, expect);
  EXPECT_EQ(saver.stats().guard_saved, 1u);
}

TEST_F(TextSaverTest, UnreadableOrHugeRangesAreNackedWithTheReason) {
  TextSaver saver(walker_, *store_, true);
  g_.unmap(kBase + 2 * 4096);
  HoldRecord h = saver.on_guard_notice(at(1, {}), GuardNoticeEvent{1, kBase + 4096, kBase + 3 * 4096, 5});
  EXPECT_EQ(h.status, 1u);
  EXPECT_NE(h.error.find("not present"), std::string::npos) << h.error;
  HoldRecord huge = saver.on_guard_notice(at(2, {}), GuardNoticeEvent{2, kBase, kBase + (1ull << 30), 9});
  EXPECT_EQ(huge.status, 1u);
  EXPECT_NE(huge.error.find("limit"), std::string::npos) << huge.error;
  HoldRecord empty = saver.on_guard_notice(at(3, {}), GuardNoticeEvent{3, kBase + 10, kBase + 10, 9});
  EXPECT_EQ(empty.status, 1u);
  EXPECT_EQ(saver.stats().guard_failed, 3u);
  EXPECT_TRUE(records().empty());
}

// The ack word: after the copy, the notice's id is stored at its
// guest-physical address, so the guest's hold can end before the channel ack
// gets back; a failed copy stores nothing; a bad address is refused and
// counted, and the hold still stands on the channel ack.
TEST_F(TextSaverTest, SavedNoticeStoresItsIdInTheAckWord) {
  TextSaver saver(walker_, *store_, true);
  saver.set_ack_word_writer([this](uint64_t gpa, uint64_t v) { return g_.mem.write_word(gpa, v); });
  constexpr uint64_t kWord = 0x300010;
  auto word = [this] {
    uint64_t v = 0;
    EXPECT_TRUE(g_.mem.read(kWord, &v, 8));
    return v;
  };
  HoldRecord h = saver.on_guard_notice(at(1, {}), GuardNoticeEvent{41, kBase, kBase + 64, 1, kWord});
  EXPECT_EQ(h.status, 0u) << h.error;
  EXPECT_TRUE(h.word_acked) << h.word_error;
  EXPECT_EQ(word(), 41u);

  g_.unmap(kBase + 4096);
  HoldRecord failed = saver.on_guard_notice(at(2, {}), GuardNoticeEvent{42, kBase + 4096, kBase + 4200, 1, kWord});
  EXPECT_EQ(failed.status, 1u);
  EXPECT_FALSE(failed.word_acked);
  EXPECT_EQ(word(), 41u) << "a range that was not saved must not end the hold early";

  HoldRecord unaligned = saver.on_guard_notice(at(3, {}), GuardNoticeEvent{43, kBase, kBase + 64, 1, kWord + 4});
  EXPECT_EQ(unaligned.status, 0u) << "the text was saved; only the early ack is refused";
  EXPECT_FALSE(unaligned.word_acked);
  EXPECT_NE(unaligned.word_error.find("aligned"), std::string::npos) << unaligned.word_error;
  HoldRecord outside = saver.on_guard_notice(at(4, {}), GuardNoticeEvent{44, kBase, kBase + 64, 1, 64ull << 30});
  EXPECT_FALSE(outside.word_acked);
  EXPECT_NE(outside.word_error.find("not RAM"), std::string::npos) << outside.word_error;
  HoldRecord at_end = saver.on_guard_notice(at(5, {}), GuardNoticeEvent{45, kBase, kBase + 64, 1, (4u << 20) - 4});
  EXPECT_FALSE(at_end.word_acked) << "a word crossing the end of RAM";
  EXPECT_EQ(word(), 41u);
  EXPECT_EQ(saver.stats().word_acks, 1u);
  EXPECT_EQ(saver.stats().word_ack_failed, 3u);

  // Without a writer (or a notice without a word) nothing is stored.
  TextSaver plain(walker_, *store_, true);
  HoldRecord p = plain.on_guard_notice(at(6, {}), GuardNoticeEvent{46, kBase, kBase + 64, 1, kWord});
  EXPECT_FALSE(p.word_acked);
  EXPECT_EQ(word(), 41u);
}

TEST_F(TextSaverTest, ALoadEventThatArrivesAfterItsFreeTakesTheGuardCopy) {
  TextSaver saver(walker_, *store_, true);
  uint64_t a = kBase + 64;
  auto original = g_.bytes(a, 96);
  // The notice (time 200) overtook the load event (time 100); then the guest
  // filled the freed image with int3.
  saver.on_guard_notice(at(200, {}), GuardNoticeEvent{1, kBase, kBase + 256, 1});
  g_.fill(kBase, 256, 0xCC);
  saver.on_event(at(100, ksym(a, 96, false, "bpf_prog_1")));
  // A later load at the same address (time 300) reads guest RAM again.
  saver.on_event(at(300, ksym(a, 96, false, "bpf_prog_2")));
  auto recs = records();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[1].source, TextSource::Load);
  EXPECT_EQ(recs[1].name, "bpf_prog_1");
  EXPECT_EQ(recs[1].bytes, original);
  EXPECT_EQ(recs[2].bytes, std::vector<uint8_t>(96, 0xCC));
  EXPECT_EQ(saver.stats().loads_from_guard, 1u);
  // With the guard on, unloads need no best-effort copy.
  saver.on_event(at(400, ksym(a, 96, true, "bpf_prog_2")));
  EXPECT_EQ(saver.stats().unregister_copies, 0u);
  EXPECT_EQ(saver.stats().unloads_lost, 0u);
}

TEST_F(TextSaverTest, BestEffortCountsUnloadsThatLostTheirText) {
  TextSaver saver(walker_, *store_, false);
  uint64_t a = kBase + 0x100, b = kBase + 0x400, c = kBase + 0x5000, d = kBase + 0x800;
  for (uint64_t x : {a, b, c, d}) saver.on_event(at(1, ksym(x, 64, false, "p" + std::to_string(x & 0xffff))));
  g_.fill(b, 64, 0xCC);       // invalidated before the host read it
  g_.unmap(c);                // already unmapped
  g_.fill(d, 8, 0x90);        // rewritten
  for (uint64_t x : {a, b, c, d}) saver.on_event(at(2, ksym(x, 64, true, "p" + std::to_string(x & 0xffff))));
  const auto& s = saver.stats();
  EXPECT_EQ(s.unloads_seen, 4u);
  EXPECT_EQ(s.unloads_lost, 3u);
  EXPECT_EQ(s.unregister_copies, 3u);
  ASSERT_EQ(saver.lost_unloads().size(), 3u);
  EXPECT_NE(saver.lost_unloads()[0].find("overwritten with int3"), std::string::npos);
  EXPECT_NE(saver.lost_unloads()[1].find("unreadable"), std::string::npos);
  EXPECT_NE(saver.lost_unloads()[2].find("changed since load"), std::string::npos);
  // Module text: load and unload events carry .text address and size.
  saver.on_event(at(3, ModuleEvent{true, "dummy", kBase + 0x2000, 128, kBase + 0x2000, 4096}));
  saver.on_event(at(4, ModuleEvent{false, "dummy", kBase + 0x2000, 128, kBase + 0x2000, 4096}));
  EXPECT_EQ(saver.stats().unloads_seen, 5u);
  EXPECT_EQ(saver.stats().unloads_lost, 3u);
  auto recs = records();
  EXPECT_EQ(recs.back().source, TextSource::Unregister);
  EXPECT_EQ(recs.back().name, "dummy");
  // The whole executable core from .text on (one page here), not just the
  // 128 bytes of .text: .text.unlikely, .exit.text etc. follow it.
  EXPECT_EQ(recs.back().bytes.size(), 4096u);
}

}  // namespace
}  // namespace kt
