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

// What the holder boost lowers by: the holds in the last table read.
TEST(GuardMirror, TheWaitingHoldsAreThoseOfTheLastTableRead) {
  FakeGuest g;
  write_header(g.mem);
  write_notice(g.mem, 3, 42);
  write_notice(g.mem, 7, 43);
  GuardMirror m(g.mem);
  ASSERT_TRUE(m.locate(ack_of(3)).ok());
  ASSERT_TRUE(m.poll());
  EXPECT_EQ(m.waiting(), (std::set<uint64_t>{42, 43}));
  ASSERT_TRUE(m.poll());  // unchanged: the same
  EXPECT_EQ(m.waiting(), (std::set<uint64_t>{42, 43}));
  g.mem.write_u64(notice_of(3) + offsetof(ktguard_notice, id), 0);  // hold 42 ends
  bump_seq(g.mem);
  auto got = m.poll();
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->empty());
  EXPECT_EQ(m.waiting(), (std::set<uint64_t>{43}));
  m.forget();
  EXPECT_TRUE(m.waiting().empty());
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

// ktguard's pointer to its block, as the guest's symbols and page tables show
// it: the pointer at kBase + 0x800, the block mapped at kBase + 0x1000.
constexpr uint64_t kPointerVa = kBase + 0x800, kBlockVa = kBase + 0x1000;
void map_block_and_point(FakeGuest& g, uint64_t pointer) {
  g.mem.write_u64(0x103000 + 8, kBlock | 1);  // the PTE of kBase + 0x1000
  g.mem.write_u64(kTextPhys + 0x800, pointer);
}
std::vector<GuestSymbolRecord> ktguard_symbols(const std::string& module = "ktguard") {
  return {{kBase, 't', "ktg_open", module}, {kPointerVa, 'B', KTGUARD_SHARED_SYMBOL, module}};
}

TEST(GuardMirror, KtguardsPointerFindsTheBlockBeforeAnyNotice) {
  FakeGuest g;
  write_header(g.mem);
  map_block_and_point(g, kBlockVa);
  PageWalker walker(g.mem, g.cfg);
  auto base = shared_block_address(ktguard_symbols(), walker);
  ASSERT_TRUE(base) << base.error().message;
  EXPECT_EQ(*base, kBlock);
  GuardMirror m(g.mem);
  ASSERT_TRUE(m.locate_block(*base).ok());
  EXPECT_TRUE(m.located());
  write_notice(g.mem, 9, 77);
  auto got = m.poll();
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].notice.id, 77u);
  // The first notice's ack word names the same block: nothing is forgotten.
  ASSERT_TRUE(m.locate(ack_of(9)).ok());
  auto again = m.poll();
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->empty());
}

TEST(GuardMirror, AMissingNullOrWrongPointerIsAnErrorThatSaysWhich) {
  FakeGuest g;
  write_header(g.mem);
  PageWalker walker(g.mem, g.cfg);
  auto expect_error = [&](const std::vector<GuestSymbolRecord>& syms, const std::string& what) {
    auto base = shared_block_address(syms, walker);
    ASSERT_FALSE(base) << what;
    EXPECT_NE(base.error().message.find(what), std::string::npos) << base.error().message;
  };
  expect_error({}, "is not among the guest's symbols");
  expect_error(ktguard_symbols("other_module"), "is not among the guest's symbols");
  map_block_and_point(g, 0);
  expect_error(ktguard_symbols(), "is NULL");
  map_block_and_point(g, kBase + 0x200000);  // not mapped
  expect_error(ktguard_symbols(), "points to 0xffffffffc0200000");
  std::vector<GuestSymbolRecord> unmapped = {{kBase + 0x300000, 'B', KTGUARD_SHARED_SYMBOL, "ktguard"}};
  expect_error(unmapped, "reading ktguard_shared_block at 0xffffffffc0300000");
  // A block address must be the block's start, and its header ktguard's.
  GuardMirror m(g.mem);
  auto unaligned = m.locate_block(kBlock + 64);
  ASSERT_FALSE(unaligned.ok());
  EXPECT_NE(unaligned.error().message.find("not aligned to its size"), std::string::npos) << unaligned.error().message;
  write_header(g.mem, 0x1122334455667788ull);
  auto magic = m.locate_block(kBlock);
  ASSERT_FALSE(magic.ok());
  EXPECT_NE(magic.error().message.find("is not ktguard's"), std::string::npos) << magic.error().message;
  EXPECT_FALSE(m.located());
}

}  // namespace
}  // namespace kt
