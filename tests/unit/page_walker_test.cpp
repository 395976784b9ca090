// PageWalker against synthetic page tables built in BufferMemory.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>

#include "kthost/introspect/page_walker.h"

namespace kt {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kGiB = 1ULL << 30;
constexpr uint64_t kP = 1, kRW = 2, kUS = 4, kPS = 0x80;
constexpr uint64_t kNX = 1ULL << 63;
enum Level : unsigned { kPml5, kPml4, kPdpt, kPd, kPt };
constexpr unsigned kShift[] = {48, 39, 30, 21, 12};
constexpr const char* kName[] = {"PML5", "PML4", "PDPT", "PD", "PT"};

// Builds page tables in a BufferMemory. Tables are bump-allocated from
// `table_base`. `claimed_ram` may exceed the buffer so that 1 GiB pages can be
// wholly "RAM" without allocating a gigabyte.
class PageTableBuilder {
 public:
  explicit PageTableBuilder(PagingMode mode, uint64_t buffer = 16 * kMiB,
                            uint64_t claimed_ram = 0, uint64_t table_base = 1 * kMiB)
      : mode_(mode),
        mem_(std::vector<uint8_t>(buffer),
             PhysMap({{0, claimed_ram ? claimed_ram : buffer, 0}})),
        next_table_(table_base) {
    root_ = new_table();
  }

  uint64_t new_table() {
    const uint64_t t = next_table_;
    next_table_ += 4096;
    return t;
  }
  BufferMemory& mem() { return mem_; }
  uint64_t root() const { return root_; }
  PagingConfig config(unsigned max_phys_bits = 52) const {
    return {mode_, root_, max_phys_bits};
  }

  // Maps one page of `size` at vaddr -> paddr. Missing tables are created with
  // P|RW|US so the leaf's flags decide; `leaf_flags` gets P (and PS if large).
  void map(uint64_t vaddr, uint64_t paddr, uint64_t size, uint64_t leaf_flags = kRW,
           uint64_t root = 0) {
    const unsigned leaf = size == kGiB ? kPdpt : size == 2 * kMiB ? kPd : kPt;
    uint64_t table = root ? root : root_;
    for (unsigned level = first(); level < leaf; ++level) {
      const uint64_t at = slot(table, vaddr, level);
      uint64_t e = read(at);
      if ((e & kP) == 0) {
        e = new_table() | kP | kRW | kUS;
        mem_.write_u64(at, e);
      }
      table = e & 0x000f'ffff'ffff'f000ULL;
    }
    mem_.write_u64(slot(table, vaddr, leaf), paddr | leaf_flags | kP | (leaf == kPt ? 0 : kPS));
  }

  // Physical address of the entry for `vaddr` at `level` (tables must exist).
  uint64_t entry_addr(uint64_t vaddr, unsigned level) {
    uint64_t table = root_;
    for (unsigned l = first(); l < level; ++l) table = read(slot(table, vaddr, l)) & 0x000f'ffff'ffff'f000ULL;
    return slot(table, vaddr, level);
  }
  void set_entry(uint64_t vaddr, unsigned level, uint64_t value) {
    mem_.write_u64(entry_addr(vaddr, level), value);
  }
  uint64_t entry(uint64_t vaddr, unsigned level) { return read(entry_addr(vaddr, level)); }
  void modify(uint64_t vaddr, unsigned level, uint64_t set, uint64_t clear = 0) {
    set_entry(vaddr, level, (entry(vaddr, level) | set) & ~clear);
  }
  unsigned first() const { return mode_ == PagingMode::Level5 ? kPml5 : kPml4; }

 private:
  static uint64_t slot(uint64_t table, uint64_t vaddr, unsigned level) {
    return table + ((vaddr >> kShift[level]) & 511) * 8;
  }
  uint64_t read(uint64_t gpa) {
    uint64_t v = 0;
    EXPECT_TRUE(mem_.read(gpa, &v, 8).ok());
    return v;
  }

  PagingMode mode_;
  BufferMemory mem_;
  uint64_t next_table_;
  uint64_t root_;
};

constexpr uint64_t kText = 0xffff'ffff'8100'0000ULL;
constexpr uint64_t kUser = 0x0000'0000'0040'0000ULL;
constexpr uint64_t kText5 = 0xff11'2233'4460'0000ULL;  // needs bit 56 sign extension

std::string hex_str(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

void expect_error(const Result<Translation>& r, ErrorCode code, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, code) << r.error().message;
  for (const std::string& p : parts) {
    EXPECT_NE(r.error().message.find(p), std::string::npos) << "'" << p << "' not in: " << r.error().message;
  }
}

struct PageCase {
  PagingMode mode;
  uint64_t vaddr;
  uint64_t size;
};

TEST(PageWalkerTest, TranslatesEachPageSizeInBothModes) {
  for (PageCase c : {PageCase{PagingMode::Level4, kText, 4096}, PageCase{PagingMode::Level4, kText, 2 * kMiB},
                     PageCase{PagingMode::Level4, 0xffff'8880'0000'0000ULL, kGiB},
                     PageCase{PagingMode::Level5, kText5, 4096}, PageCase{PagingMode::Level5, kText5, 2 * kMiB},
                     PageCase{PagingMode::Level5, 0xff11'0000'0000'0000ULL, kGiB}}) {
    SCOPED_TRACE(hex_str(c.vaddr) + " size " + hex_str(c.size));
    PageTableBuilder b(c.mode, 16 * kMiB, 4 * kGiB);
    const uint64_t phys = c.size == kGiB ? kGiB : 4 * kMiB;
    b.map(c.vaddr, phys, c.size, kRW);
    PageWalker w(b.mem(), b.config());
    const uint64_t off = c.size == 4096 ? 0x123 : c.size - 8;
    Result<Translation> t = w.walk(c.vaddr + off);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->virt_page, c.vaddr);
    EXPECT_EQ(t->phys_page, phys);
    EXPECT_EQ(t->page_size, c.size);
    EXPECT_EQ(t->phys(c.vaddr + off), phys + off);
    EXPECT_TRUE(t->writable);
    EXPECT_FALSE(t->user);
    EXPECT_TRUE(t->executable);
    EXPECT_EQ(*w.virt_to_phys(c.vaddr + off), phys + off);
  }
}

TEST(PageWalkerTest, FlagsAccumulateAcrossLevels) {
  PageTableBuilder b(PagingMode::Level4);
  b.map(kUser, 0x500000, 4096, kRW | kUS);
  b.map(kUser + 0x1000, 0x501000, 4096, kRW | kUS);
  PageWalker w(b.mem(), b.config());
  Result<Translation> t = w.walk(kUser);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->writable && t->user && t->executable);

  b.modify(kUser, kPdpt, kNX);  // NX above the leaf wins over the leaf's clear NX
  b.modify(kUser, kPd, 0, kRW);
  b.modify(kUser + 0x1000, kPt, 0, kUS);
  t = w.walk(kUser);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->executable);
  EXPECT_FALSE(t->writable);
  EXPECT_TRUE(t->user);
  t = w.walk(kUser + 0x1000);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->user);
  b.modify(kUser, kPml4, 0, kUS);
  EXPECT_FALSE(w.walk(kUser)->user);
}

TEST(PageWalkerTest, PtiRootPairAndCr3) {
  PageTableBuilder b(PagingMode::Level4, 16 * kMiB, 0, 2 * kMiB);  // root 8 KiB aligned
  const uint64_t kernel_root = b.root();
  const uint64_t user_root = b.new_table();
  ASSERT_EQ(user_root, kernel_root + 4096);
  b.map(kText, 0x400000, 2 * kMiB, kRW);
  b.map(kUser, 0x600000, 4096, kUS, kernel_root);
  b.map(kUser, 0x600000, 4096, kUS, user_root);

  PageWalker user(b.mem(), {PagingMode::Level4, user_root});
  EXPECT_EQ(user.walk(kUser)->phys_page, 0x600000u);
  expect_error(user.walk(kText), ErrorCode::NotPresent, {"PML4", hex_str(user_root + 511 * 8)});

  const uint64_t cr3 = (1ULL << 63) | user_root | 0x5;  // no-flush bit, PCID 5
  const uint64_t cr4 = (1ULL << 17);                    // PCIDE
  EXPECT_EQ(PageWalker::root_from_cr3(cr3, cr4), user_root);
  EXPECT_EQ(PageWalker::pti_kernel_root(PageWalker::root_from_cr3(cr3, cr4)), kernel_root);
  EXPECT_EQ(PageWalker::pti_kernel_root(kernel_root), kernel_root);
  PageWalker kernel(b.mem(), {PagingMode::Level4, PageWalker::pti_kernel_root(user_root)});
  EXPECT_EQ(kernel.walk(kText + 0x1234)->phys(kText + 0x1234), 0x401234u);
  EXPECT_EQ(kernel.walk(kUser)->phys_page, 0x600000u);
}

TEST(PageWalkerTest, RootFromCr3AndModeFromCr4) {
  EXPECT_EQ(PageWalker::root_from_cr3(0x8000'0000'0123'4fffULL, 1ULL << 17), 0x1234000u);
  EXPECT_EQ(PageWalker::root_from_cr3(0x1234018, 0), 0x1234000u);  // PWT|PCD without PCIDE
  EXPECT_EQ(PageWalker::root_from_cr3((1ULL << 50) | (3ULL << 61) | 0x5000, 0, 46), 0x5000u);
  EXPECT_EQ(PageWalker::root_from_cr3((1ULL << 45) | 0x5000, 0, 46), (1ULL << 45) | 0x5000);
  EXPECT_EQ(PageWalker::mode_from_cr4(0x3506f0), PagingMode::Level4);
  EXPECT_EQ(PageWalker::mode_from_cr4(0x3506f0 | (1ULL << 12)), PagingMode::Level5);
}

TEST(PageWalkerTest, NonCanonicalInBothModes) {
  using PW = PageWalker;
  EXPECT_TRUE(PW::is_canonical(0x0000'7fff'ffff'ffffULL, PagingMode::Level4));
  EXPECT_TRUE(PW::is_canonical(0xffff'8000'0000'0000ULL, PagingMode::Level4));
  EXPECT_FALSE(PW::is_canonical(0x0000'8000'0000'0000ULL, PagingMode::Level4));
  EXPECT_FALSE(PW::is_canonical(0xffff'7fff'ffff'ffffULL, PagingMode::Level4));
  EXPECT_TRUE(PW::is_canonical(0x0000'8000'0000'0000ULL, PagingMode::Level5));
  EXPECT_TRUE(PW::is_canonical(0x00ff'ffff'ffff'ffffULL, PagingMode::Level5));
  EXPECT_TRUE(PW::is_canonical(0xff00'0000'0000'0000ULL, PagingMode::Level5));
  EXPECT_FALSE(PW::is_canonical(0x0100'0000'0000'0000ULL, PagingMode::Level5));
  EXPECT_FALSE(PW::is_canonical(0xfeff'ffff'ffff'ffffULL, PagingMode::Level5));

  PageTableBuilder b4(PagingMode::Level4), b5(PagingMode::Level5);
  PageWalker w4(b4.mem(), b4.config()), w5(b5.mem(), b5.config());
  expect_error(w4.walk(0x0000'8000'0000'0000ULL), ErrorCode::NonCanonical, {"0x800000000000", "4-level"});
  expect_error(w5.walk(0x0100'0000'0000'0000ULL), ErrorCode::NonCanonical, {"0x100000000000000", "5-level"});
  // Canonical but unmapped in 5-level mode: the walk gets as far as the PML5.
  expect_error(w5.walk(0x0000'8000'0000'0000ULL), ErrorCode::NotPresent, {"PML5"});
  expect_error(w4.translate(0xdead'0000'0000'0000ULL), ErrorCode::NonCanonical, {});
}

TEST(PageWalkerTest, NotPresentAtEachLevel) {
  for (PagingMode mode : {PagingMode::Level4, PagingMode::Level5}) {
    const unsigned first = mode == PagingMode::Level5 ? kPml5 : kPml4;
    for (unsigned level = first; level <= kPt; ++level) {
      PageTableBuilder b(mode);
      const uint64_t va = mode == PagingMode::Level5 ? kText5 : kText;
      b.map(va, 0x400000, 4096);
      const uint64_t at = b.entry_addr(va, level);
      const uint64_t stale = b.entry(va, level) & ~kP;  // other bits are ignored when P=0
      b.set_entry(va, level, stale | (1ULL << 51));
      PageWalker w(b.mem(), b.config(40));
      expect_error(w.walk(va + 8), ErrorCode::NotPresent,
                   {hex_str(va + 8), std::string(kName[level]) + " entry at " + hex_str(at),
                    hex_str(stale | (1ULL << 51))});
    }
  }
}

TEST(PageWalkerTest, ReservedAddressBitsAtEachLevel) {
  for (unsigned level = kPml5; level <= kPt; ++level) {
    PageTableBuilder b(PagingMode::Level5);
    b.map(kText5, 0x400000, 4096);
    b.modify(kText5, level, 1ULL << 46);
    PageWalker w46(b.mem(), b.config(46));
    expect_error(w46.walk(kText5), ErrorCode::ReservedBits, {kName[level], "MAXPHYADDR 46"});
    // With 52 physical bits the same bit is an address bit, pointing outside RAM.
    PageWalker w52(b.mem(), b.config(52));
    expect_error(w52.walk(kText5), ErrorCode::OutOfRange, {});
  }
}

TEST(PageWalkerTest, PsIsReservedInPml5AndPml4) {
  for (unsigned level : {kPml5, kPml4}) {
    PageTableBuilder b(PagingMode::Level5);
    b.map(kText5, 0x400000, 4096);
    b.modify(kText5, level, kPS);
    PageWalker w(b.mem(), b.config());
    expect_error(w.walk(kText5), ErrorCode::ReservedBits, {kName[level], "PS"});
  }
}

TEST(PageWalkerTest, LargePageAlignmentBitsAreReservedButPatIsNot) {
  PageTableBuilder b(PagingMode::Level4, 16 * kMiB, 4 * kGiB);
  const uint64_t va1g = 0xffff'8880'0000'0000ULL;
  b.map(va1g, kGiB, kGiB);
  b.map(kText, 4 * kMiB, 2 * kMiB);
  PageWalker w(b.mem(), b.config());
  const uint64_t pat = 1ULL << 12;
  b.modify(va1g, kPdpt, pat);
  b.modify(kText, kPd, pat);
  EXPECT_EQ(w.walk(va1g)->phys_page, kGiB);
  EXPECT_EQ(w.walk(kText)->phys_page, 4 * kMiB);
  for (uint64_t bit : {13, 20, 29}) {
    b.modify(va1g, kPdpt, 1ULL << bit);
    expect_error(w.walk(va1g), ErrorCode::ReservedBits, {"PDPT"});
    b.modify(va1g, kPdpt, 0, 1ULL << bit);
  }
  for (uint64_t bit : {13, 20}) {
    b.modify(kText, kPd, 1ULL << bit);
    expect_error(w.walk(kText), ErrorCode::ReservedBits, {"PD entry"});
    b.modify(kText, kPd, 0, 1ULL << bit);
  }
  EXPECT_TRUE(w.walk(va1g).ok());
  EXPECT_TRUE(w.walk(kText).ok());
}

TEST(PageWalkerTest, TableAndFinalPageOutsideRam) {
  PageTableBuilder b(PagingMode::Level4, 15 * kMiB);
  b.map(kText, 0x400000, 4096);
  b.map(kUser, 0x400000, 4096);
  b.map(kUser + 2 * kMiB, 14 * kMiB, 2 * kMiB);  // ends 1 MiB past RAM
  PageWalker w(b.mem(), b.config());
  b.set_entry(kText, kPdpt, 0x4000'0000ULL | kP | kRW);
  expect_error(w.walk(kText), ErrorCode::OutOfRange, {"PD table at 0x40000000"});
  b.set_entry(kUser, kPt, 0x100'0000ULL | kP);
  expect_error(w.walk(kUser), ErrorCode::OutOfRange, {"PT entry", "0x1000000"});
  expect_error(w.walk(kUser + 2 * kMiB), ErrorCode::OutOfRange, {"PD entry", "0xe00000"});
  PageWalker bad_root(b.mem(), {PagingMode::Level4, 1ULL << 40});
  expect_error(bad_root.walk(kText), ErrorCode::OutOfRange, {"PML4 table"});
}

TEST(PageWalkerTest, Cycles) {
  PageTableBuilder b(PagingMode::Level4);
  b.map(kText, 0x400000, 4096);
  PageWalker w(b.mem(), b.config());
  const uint64_t root = b.root();
  b.set_entry(kUser, kPml4, root | kP | kRW);  // PML4E -> its own table
  expect_error(w.walk(kUser), ErrorCode::Cycle, {"PML4 entry at " + hex_str(root), hex_str(root)});

  const uint64_t pdpt = b.entry(kText, kPml4) & ~0xfffULL;
  b.set_entry(kText, kPdpt, root | kP);  // PML4 -> PDPT -> PML4
  expect_error(w.walk(kText), ErrorCode::Cycle, {"PDPT entry at " + hex_str(pdpt + 8 * 510)});
}

// The expected list for a fixed set of mappings: user 4K x2, a 2M user page,
// kernel text 2M x2, one 1G direct-map page; plus entries enumeration must skip.
TEST(PageWalkerTest, ForEachMappingEnumeratesInOrder) {
  PageTableBuilder b(PagingMode::Level4, 16 * kMiB, 4 * kGiB);
  const uint64_t direct = 0xffff'8880'0000'0000ULL;
  b.map(kText + 2 * kMiB, 6 * kMiB, 2 * kMiB, 0);
  b.map(kText, 4 * kMiB, 2 * kMiB, kRW);
  b.map(direct, kGiB, kGiB, kRW | kNX);
  b.map(kUser + 0x1000, 0x301000, 4096, kUS);
  b.map(kUser, 0x300000, 4096, kUS | kRW);
  b.map(kUser + 4 * kMiB, 8 * kMiB, 2 * kMiB, kUS);
  b.set_entry(kUser + 0x2000, kPt, 0x302000 | kP | (1ULL << 50));  // reserved bit: skipped
  b.set_entry(kUser + 0x3000, kPt, (5 * kGiB) | kP);               // not RAM: skipped
  PageWalker w(b.mem(), b.config(48));

  std::vector<Translation> seen;
  auto collect = [&](const Translation& t) {
    seen.push_back(t);
    return true;
  };
  ASSERT_TRUE(w.for_each_mapping(0, std::numeric_limits<uint64_t>::max(), collect).ok());
  struct Want {
    uint64_t virt, phys, size;
    bool w, u, x;
  };
  const std::vector<Want> want = {
      {kUser, 0x300000, 4096, true, true, true},
      {kUser + 0x1000, 0x301000, 4096, false, true, true},
      {kUser + 4 * kMiB, 8 * kMiB, 2 * kMiB, false, true, true},
      {direct, kGiB, kGiB, true, false, false},
      {kText, 4 * kMiB, 2 * kMiB, true, false, true},
      {kText + 2 * kMiB, 6 * kMiB, 2 * kMiB, false, false, true},
  };
  ASSERT_EQ(seen.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(seen[i].virt_page, want[i].virt);
    EXPECT_EQ(seen[i].phys_page, want[i].phys);
    EXPECT_EQ(seen[i].page_size, want[i].size);
    EXPECT_EQ(seen[i].writable, want[i].w);
    EXPECT_EQ(seen[i].user, want[i].u);
    EXPECT_EQ(seen[i].executable, want[i].x);
    Result<Translation> t = w.walk(seen[i].virt_page);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->phys_page, seen[i].phys_page);
  }
  // A sub-range reports every page that intersects it, unclipped.
  seen.clear();
  ASSERT_TRUE(w.for_each_mapping(kUser + 0x1fff, direct + 1, collect).ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].virt_page, kUser + 0x1000);
  EXPECT_EQ(seen[2].virt_page, direct);
  // The callback stops the enumeration.
  seen.clear();
  ASSERT_TRUE(w.for_each_mapping(0, ~0ULL, [&](const Translation& t) {
    seen.push_back(t);
    return seen.size() < 2;
  }).ok());
  EXPECT_EQ(seen.size(), 2u);
  seen.clear();
  EXPECT_TRUE(w.for_each_mapping(5, 5, collect).ok());
  EXPECT_TRUE(seen.empty());
}

TEST(PageWalkerTest, ForEachMappingStopsAtMaxTablesOnHostileTables) {
  PageTableBuilder b(PagingMode::Level4);
  uint64_t table = b.root();
  for (int level = 0; level < 3; ++level) {  // PML4 -> T1 -> T2 -> T3, 512 times each
    const uint64_t next = b.new_table();
    for (uint64_t i = 0; i < 512; ++i) b.mem().write_u64(table + 8 * i, next | kP);
    table = next;
  }
  for (uint64_t i = 0; i < 512; ++i) b.mem().write_u64(table + 8 * i, 0x800000 | kP);
  PageWalker w(b.mem(), b.config());
  size_t calls = 0;
  Status st = w.for_each_mapping(0, ~0ULL, [&](const Translation&) { return ++calls, true; }, 100);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::LimitExceeded);
  EXPECT_EQ(calls, 97u * 512);  // tables 4..100 are the leaf table T3
  EXPECT_TRUE(w.walk(0x7fff'ffff'f000ULL).ok());
}

TEST(PageWalkerTest, ReadVirtualAcrossPages) {
  PageTableBuilder b(PagingMode::Level4);
  b.map(kText, 0x500000, 4096);
  b.map(kText + 0x1000, 0x300000, 4096);
  b.mem().write(0x500ffc, "ABCD", 4);
  b.mem().write(0x300000, "EFGH", 4);
  PageWalker w(b.mem(), b.config());
  char out[9] = {};
  ASSERT_TRUE(w.read_virtual(kText + 0xffc, out, 8).ok());
  EXPECT_STREQ(out, "ABCDEFGH");
  Status st = w.read_virtual(kText + 0x1ffc, out, 8);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::NotPresent);
  EXPECT_NE(st.error().message.find("vaddr " + hex_str(kText + 0x2000)), std::string::npos) << st.error().message;
  EXPECT_EQ(w.read_virtual(~0ULL - 3, out, 8).error().code, ErrorCode::OutOfRange);
  EXPECT_TRUE(w.read_virtual(0x1234, out, 0).ok());
}

TEST(PageWalkerTest, CacheHitsMissesAndFlush) {
  PageTableBuilder b(PagingMode::Level4);
  b.map(kText, 0x500000, 4096);
  b.map(kUser, 4 * kMiB, 2 * kMiB);
  PageWalker w(b.mem(), b.config(), 3);  // rounds up to 4 slots per size
  ASSERT_TRUE(w.translate(kText).ok());
  ASSERT_TRUE(w.translate(kText + 0xfff).ok());
  ASSERT_TRUE(w.translate(kUser + 0x1000).ok());
  EXPECT_EQ(w.translate(kUser + 0x1f'ffff)->phys(kUser + 0x1f'ffff), 6 * kMiB - 1);
  EXPECT_FALSE(w.translate(kText + 0x1000).ok());  // failures are not cached
  EXPECT_FALSE(w.translate(kText + 0x1000).ok());
  EXPECT_EQ(w.cache_stats().hits, 2u);
  EXPECT_EQ(w.cache_stats().misses, 4u);

  b.set_entry(kText, kPt, 0x600000 | kP);  // stale until flushed
  EXPECT_EQ(*w.virt_to_phys(kText), 0x500000u);
  w.flush_cache();
  EXPECT_EQ(*w.virt_to_phys(kText), 0x600000u);
  EXPECT_EQ(w.cache_stats().hits, 3u);
  EXPECT_EQ(w.cache_stats().misses, 5u);

  PageWalker one(b.mem(), b.config(), 1);  // two pages on one slot evict each other
  b.map(kText + 0x4000, 0x504000, 4096);
  for (uint64_t va : {kText, kText + 0x4000, kText}) ASSERT_TRUE(one.translate(va).ok());
  EXPECT_EQ(one.cache_stats().misses, 3u);
  EXPECT_EQ(one.cache_stats().hits, 0u);
}

}  // namespace
}  // namespace kt
