// ktguard's shared block as the host polls it (GuardMirror): written here the
// way guard_chan.c writes it, into a BufferMemory standing in for guest RAM.
#include <gtest/gtest.h>

#include <cstring>

#include "fake_guest.h"
#include "kthost/capture/guard_mirror.h"
#include "ktguard_uapi.h"

namespace kt {
namespace {

using namespace test;

constexpr uint64_t kBlock = 0x340000;  // KTGUARD_SHARED_SIZE-aligned
constexpr uint32_t kSlots = 256;
constexpr uint32_t kAckOffset = 64, kNoticeOffset = 64 + 8 * kSlots;

uint64_t ack_of(uint32_t slot) { return kBlock + kAckOffset + 8ull * slot; }
uint64_t notice_of(uint32_t slot) { return kBlock + kNoticeOffset + uint64_t{KTGUARD_NOTICE_SIZE} * slot; }

// The header as ktguard writes it.
ktguard_shared_header good_header() {
  ktguard_shared_header h{};
  h.magic = KTGUARD_SHARED_MAGIC;
  h.version = KTGUARD_SHARED_VERSION;
  h.slots = kSlots;
  h.ack_offset = kAckOffset;
  h.notice_offset = kNoticeOffset;
  h.notice_size = KTGUARD_NOTICE_SIZE;
  return h;
}
void write_header(BufferMemory& mem, uint64_t magic = KTGUARD_SHARED_MAGIC) {
  ktguard_shared_header h = good_header();
  h.magic = magic;
  mem.write(kBlock, &h, sizeof h);
}
void bump_seq(BufferMemory& mem) {
  uint64_t seq = 0;
  ASSERT_TRUE(mem.read(kBlock + offsetof(ktguard_shared_header, seq), &seq, 8));
  mem.write_u64(kBlock + offsetof(ktguard_shared_header, seq), seq + 1);
}
void write_notice(BufferMemory& mem, uint32_t slot, uint64_t id, uint64_t start = kBase + 16, uint32_t kind = 1) {
  ktguard_notice n{};
  n.id = id;
  n.start = start;
  n.end = start + 64;
  n.kind = kind;
  n.cpu = 1;
  n.time_ns = 1000 + id;
  n.ack_addr = ack_of(slot);
  mem.write(notice_of(slot), &n, sizeof n);
  bump_seq(mem);
}

TEST(GuardMirror, FindsTheBlockFromAnAckWordAndReturnsEachWaitingNoticeOnce) {
  FakeGuest g;
  write_header(g.mem);
  write_notice(g.mem, 3, 42);
  GuardMirror m(g.mem);
  ASSERT_TRUE(m.locate(ack_of(3)).ok());
  auto first = m.poll();
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].notice.id, 42u);
  EXPECT_EQ((*first)[0].notice.start, kBase + 16);
  EXPECT_EQ((*first)[0].notice.end, kBase + 80);
  EXPECT_EQ((*first)[0].notice.ack_addr, ack_of(3));
  EXPECT_EQ((*first)[0].cpu, 1u);
  EXPECT_EQ((*first)[0].time_ns, 1042u);
  // Unchanged seq: one 8-byte read, no table read, nothing new.
  const uint64_t reads = m.stats().table_reads;
  auto again = m.poll();
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->empty());
  EXPECT_EQ(m.stats().table_reads, reads);
  // A second hold in another slot: only it comes.
  write_notice(g.mem, 7, 43);
  auto second = m.poll();
  ASSERT_TRUE(second);
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].notice.id, 43u);
  EXPECT_GT(m.stats().table_reads, reads);
}

TEST(GuardMirror, AnyAckWordOfTheBlockFindsItAndOthersAreRefused) {
  FakeGuest g;
  write_header(g.mem);
  GuardMirror m(g.mem);
  EXPECT_TRUE(m.locate(ack_of(kSlots - 1)).ok());
  m.forget();
  auto header = m.locate(kBlock + 8);  // inside the header, not an ack word
  EXPECT_FALSE(header.ok());
  EXPECT_NE(header.error().message.find("is not one of its ack words"), std::string::npos) << header.error().message;
  EXPECT_FALSE(m.located());
  write_header(g.mem, 0x1122334455667788ull);
  auto magic = m.locate(ack_of(0));
  ASSERT_FALSE(magic.ok());
  EXPECT_NE(magic.error().message.find("magic 0x1122334455667788 is not ktguard's"), std::string::npos)
      << magic.error().message;
}

TEST(GuardMirror, HeadersThatDoNotFitTheBlockAreRefusedByName) {
  auto header = [](auto change) {
    ktguard_shared_header h = good_header();
    change(h);
    auto r = parse_guard_mirror_header(reinterpret_cast<const uint8_t*>(&h), sizeof h, kBlock);
    return r ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(header([](auto&) {}), "ok");
  EXPECT_NE(header([](auto& h) { h.version = 9; }).find("version 9"), std::string::npos);
  EXPECT_NE(header([](auto& h) { h.slots = 0; }).find("0 slots"), std::string::npos);
  EXPECT_NE(header([](auto& h) { h.slots = 100000; }).find("100000 slots"), std::string::npos);
  EXPECT_NE(header([](auto& h) { h.notice_size = 40; }).find("notice size 40"), std::string::npos);
  EXPECT_NE(header([](auto& h) { h.ack_offset = 16000; }).find("ack words at 16000"), std::string::npos);
  EXPECT_NE(header([](auto& h) { h.notice_offset = 8; }).find("notices at 8"), std::string::npos);
  EXPECT_NE(header([](auto& h) { h.notice_offset = kAckOffset; }).find("overlap"), std::string::npos);
  EXPECT_NE(header([](auto& h) { h.ack_offset = 3 + kAckOffset; }).find("ack words at"), std::string::npos);
  uint8_t shortened[10] = {};
  EXPECT_FALSE(parse_guard_mirror_header(shortened, sizeof shortened, kBlock));
}

TEST(GuardMirror, SlotsThatChangeBetweenReadsOrAreNotSaneAreNotReturned) {
  GuardMirrorLayout l{kBlock, kSlots, kAckOffset, kNoticeOffset};
  std::vector<uint8_t> a(l.table_bytes()), b;
  auto put = [&](uint32_t slot, uint64_t id, uint64_t start, uint64_t len, uint32_t kind, uint64_t ack) {
    ktguard_notice n{id, start, start + len, kind, 0, 5, ack};
    std::memcpy(a.data() + slot * KTGUARD_NOTICE_SIZE, &n, sizeof n);
  };
  put(0, 1, kBase, 64, 1, ack_of(0));                     // whole and sane
  put(1, 2, kBase, 64, 1, ack_of(1));                     // changes below
  put(2, 3, kBase, 64, 1, ack_of(5));                     // another slot's ack word
  put(3, 4, 0x400000, 64, 1, ack_of(3));                  // a user address
  put(4, 5, kBase, 0, 1, ack_of(4));                      // empty
  put(5, 6, kBase, 128u << 20, 1, ack_of(5));             // over the copy limit
  put(6, 7, kBase, 64, 0, ack_of(6));                     // kind 0
  put(7, 8, kBase, 64, KTHOST_TEXT_GUARD_KIND_MAX + 1, ack_of(7));
  b = a;
  b[1 * KTGUARD_NOTICE_SIZE + 8] ^= 1;  // slot 1 rewritten between the reads
  uint64_t rejected = 0;
  auto got = whole_mirror_notices(l, a, b, &rejected);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].notice.id, 1u);
  EXPECT_EQ(rejected, 6u);
  // Short reads: only the slots both reads hold.
  std::vector<uint8_t> one(a.begin(), a.begin() + KTGUARD_NOTICE_SIZE);
  EXPECT_EQ(whole_mirror_notices(l, one, b, nullptr).size(), 1u);
}

}  // namespace
}  // namespace kt
