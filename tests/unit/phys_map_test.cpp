// PhysMap (QEMU RAM layouts, offset lookup at edges and near 2^64) and
// BufferMemory reads across regions.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>

#include "kthost/introspect/guest_memory.h"

namespace kt {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kGiB = 1ULL << 30;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// Regions as tuples: gtest prints and compares them without extra operators.
using Region = std::tuple<uint64_t, uint64_t, uint64_t>;  // gpa, size, backing_offset
using V = std::vector<Region>;
V tuples(const std::vector<RamRegion>& regions) {
  V out;
  for (const RamRegion& r : regions) out.emplace_back(r.gpa, r.size, r.backing_offset);
  return out;
}

V layout(const std::string& machine, uint64_t ram) {
  Result<uint64_t> below = PhysMap::below_4g_for(machine, ram);
  EXPECT_TRUE(below.ok()) << machine;
  return tuples(PhysMap::split_at(ram, below.ok() ? *below : 0).regions());
}

TEST(PhysMapTest, Q35Layouts) {
  EXPECT_EQ(layout("q35", 512 * kMiB), (V{{0, 512 * kMiB, 0}}));
  EXPECT_EQ(layout("q35", 2 * kGiB), (V{{0, 2 * kGiB, 0}}));
  EXPECT_EQ(layout("q35", 3 * kGiB), (V{{0, 2 * kGiB, 0}, {4 * kGiB, 1 * kGiB, 2 * kGiB}}));
  EXPECT_EQ(layout("q35", 4 * kGiB), (V{{0, 2 * kGiB, 0}, {4 * kGiB, 2 * kGiB, 2 * kGiB}}));
  EXPECT_EQ(layout("q35", 8 * kGiB), (V{{0, 2 * kGiB, 0}, {4 * kGiB, 6 * kGiB, 2 * kGiB}}));
}

TEST(PhysMapTest, PcLayouts) {
  EXPECT_EQ(layout("pc", 512 * kMiB), (V{{0, 512 * kMiB, 0}}));
  EXPECT_EQ(layout("pc", 2 * kGiB), (V{{0, 2 * kGiB, 0}}));
  EXPECT_EQ(layout("pc", 3 * kGiB), (V{{0, 3 * kGiB, 0}}));
  EXPECT_EQ(layout("pc", 4 * kGiB), (V{{0, 3 * kGiB, 0}, {4 * kGiB, 1 * kGiB, 3 * kGiB}}));
  EXPECT_EQ(layout("pc", 8 * kGiB), (V{{0, 3 * kGiB, 0}, {4 * kGiB, 5 * kGiB, 3 * kGiB}}));
}

TEST(PhysMapTest, SplitThresholdsAreExact) {
  EXPECT_EQ(*PhysMap::below_4g_for("q35", 0xafff'f000ULL), 0xafff'f000ULL);
  EXPECT_EQ(*PhysMap::below_4g_for("q35", 0xb000'0000ULL), 0x8000'0000ULL);
  EXPECT_EQ(*PhysMap::below_4g_for("pc", 0xdfff'f000ULL), 0xdfff'f000ULL);
  EXPECT_EQ(*PhysMap::below_4g_for("pc", 0xe000'0000ULL), 0xc000'0000ULL);
}

TEST(PhysMapTest, UnknownMachineIsUnsupported) {
  Result<uint64_t> r = PhysMap::below_4g_for("microvm", kGiB);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::Unsupported);
  EXPECT_NE(r.error().message.find("microvm"), std::string::npos);
}

TEST(PhysMapTest, ConstructorSortsDropsEmptyAndKeepsFirstOfOverlap) {
  PhysMap map({{0x10000, 0x1000, 0x1000},
               {0x5000, 0, 0x9000},     // empty: dropped
               {0, 0x2000, 0},
               {0x1000, 0x4000, 0x7000},  // overlaps {0, 0x2000}: dropped
               {0x10800, 0x100, 0x8000}});  // overlaps {0x10000, ...}: dropped
  EXPECT_EQ(tuples(map.regions()), (V{{0, 0x2000, 0}, {0x10000, 0x1000, 0x1000}}));
  EXPECT_EQ(map.ram_size(), 0x3000u);
  EXPECT_EQ(map.end(), 0x11000u);
  EXPECT_EQ(PhysMap().end(), 0u);
  EXPECT_EQ(PhysMap().ram_size(), 0u);
}

TEST(PhysMapTest, ToOffsetAtRegionEdges) {
  PhysMap map = PhysMap::split_at(4 * kGiB, 2 * kGiB);
  EXPECT_EQ(map.to_offset(0, 1), 0u);
  EXPECT_EQ(map.to_offset(2 * kGiB - 1, 1), 2 * kGiB - 1);
  EXPECT_EQ(map.to_offset(2 * kGiB - 8, 8), 2 * kGiB - 8);
  EXPECT_EQ(map.to_offset(2 * kGiB - 4, 8), std::nullopt);  // runs into the PCI hole
  EXPECT_EQ(map.to_offset(2 * kGiB, 1), std::nullopt);
  EXPECT_EQ(map.to_offset(4 * kGiB - 1, 1), std::nullopt);
  EXPECT_EQ(map.to_offset(4 * kGiB, 1), 2 * kGiB);
  EXPECT_EQ(map.to_offset(4 * kGiB, 2 * kGiB), 2 * kGiB);
  EXPECT_EQ(map.to_offset(4 * kGiB, 2 * kGiB + 1), std::nullopt);
  EXPECT_EQ(map.to_offset(6 * kGiB - 1, 1), 4 * kGiB - 1);
  EXPECT_EQ(map.to_offset(6 * kGiB, 1), std::nullopt);
  EXPECT_EQ(map.to_offset(4 * kGiB, 0), 2 * kGiB);
  EXPECT_TRUE(map.contains(0, 2 * kGiB));
  EXPECT_FALSE(map.contains(0, 2 * kGiB + 1));
  EXPECT_FALSE(map.contains(2 * kGiB - 8, 16));
  EXPECT_EQ(map.end(), 6 * kGiB);
  EXPECT_EQ(map.ram_size(), 4 * kGiB);
}

TEST(PhysMapTest, ContainsSpansAdjacentRegionsButToOffsetDoesNot) {
  PhysMap map({{0, 0x1000, 0x5000}, {0x1000, 0x1000, 0}});
  EXPECT_TRUE(map.contains(0x800, 0x1000));
  EXPECT_TRUE(map.contains(0, 0x2000));
  EXPECT_FALSE(map.contains(0, 0x2001));
  EXPECT_EQ(map.to_offset(0x800, 0x1000), std::nullopt);
  EXPECT_EQ(map.to_offset(0x800, 0x800), 0x5800u);
  EXPECT_EQ(map.to_offset(0x1800, 8), 0x800u);
}

TEST(PhysMapTest, NoWrapNearTopOfAddressSpace) {
  PhysMap flat({{0, 16 * kMiB, 0}});
  EXPECT_EQ(flat.to_offset(kMax, 1), std::nullopt);
  EXPECT_EQ(flat.to_offset(0x1000, kMax), std::nullopt);
  EXPECT_EQ(flat.to_offset(kMax - 7, 16), std::nullopt);
  EXPECT_FALSE(flat.contains(0x1000, kMax));
  EXPECT_FALSE(flat.contains(kMax, kMax));

  PhysMap top({{kMax - 0xfff, 0x1000, 0}});
  EXPECT_EQ(top.to_offset(kMax, 1), 0xfffu);
  EXPECT_EQ(top.to_offset(kMax, 2), std::nullopt);
  EXPECT_EQ(top.to_offset(kMax - 0xfff, 0x1000), 0u);
  EXPECT_TRUE(top.contains(kMax - 0xfff, 0x1000));
  EXPECT_FALSE(top.contains(kMax - 7, 16));
  EXPECT_EQ(top.end(), kMax);  // saturates: the real end is 2^64

  // A region claiming to run past 2^64 is clipped at the top.
  PhysMap clipped({{kMax - 0xfff, 0x10000, 0}});
  ASSERT_EQ(clipped.regions().size(), 1u);
  EXPECT_EQ(clipped.regions()[0].size, 0x1000u);
}

// Backing laid out out of order: region A (gpa 0) at offset 0x2000, region B
// (gpa 0x1000, adjacent) at 0, region C (gpa 0x10000, after a hole) at 0x1000.
BufferMemory make_scrambled() {
  std::vector<uint8_t> bytes(0x3000);
  std::iota(bytes.begin(), bytes.end(), uint8_t{0});
  return BufferMemory(std::move(bytes),
                      PhysMap({{0, 0x1000, 0x2000}, {0x1000, 0x1000, 0}, {0x10000, 0x1000, 0x1000}}));
}

TEST(BufferMemoryTest, FlatReadWriteAndBounds) {
  BufferMemory mem(0x4000);
  EXPECT_EQ(mem.backend_name(), "buffer");
  mem.write_u64(0x3ff8, 0x1122334455667788ULL);
  uint64_t v = 0;
  ASSERT_TRUE(mem.read(0x3ff8, &v, 8).ok());
  EXPECT_EQ(v, 0x1122334455667788ULL);
  EXPECT_EQ(mem.read(0x3ffc, &v, 8).error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(mem.read(0x4000, &v, 1).error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(mem.read(kMax - 3, &v, 8).error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(mem.read(kMax, &v, 1).error().code, ErrorCode::OutOfRange);
  EXPECT_TRUE(mem.read(0x5000, &v, 0).ok());
}

TEST(BufferMemoryTest, ReadCrossesAdjacentRegions) {
  BufferMemory mem = make_scrambled();
  uint8_t out[16] = {};
  ASSERT_TRUE(mem.read(0xff8, out, sizeof out).ok());
  // Last 8 bytes of region A come from backing 0x2ff8.., the next 8 from 0x0..
  const uint8_t want[16] = {0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
                            0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(std::memcmp(out, want, sizeof out), 0);
  uint8_t c = 0;
  ASSERT_TRUE(mem.read(0x10000, &c, 1).ok());
  EXPECT_EQ(c, 0x00);  // backing 0x1000
  ASSERT_TRUE(mem.read(0x10001, &c, 1).ok());
  EXPECT_EQ(c, 0x01);
}

TEST(BufferMemoryTest, ReadIntoHoleFailsAndLeavesOutputUntouched) {
  BufferMemory mem = make_scrambled();
  uint8_t out[16];
  std::memset(out, 0xaa, sizeof out);
  Status st = mem.read(0x1ff8, out, sizeof out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::OutOfRange);
  EXPECT_NE(st.error().message.find("0x2000"), std::string::npos) << st.error().message;
  for (uint8_t b : out) EXPECT_EQ(b, 0xaa);
  EXPECT_EQ(mem.read(0x8000, out, 1).error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(mem.read(0x10ff8, out, 16).error().code, ErrorCode::OutOfRange);
}

TEST(BufferMemoryTest, MapLargerThanBufferIsBoundedByBuffer) {
  BufferMemory mem(std::vector<uint8_t>(0x1000), PhysMap({{0, kMiB, 0}}));
  uint64_t v = 0;
  EXPECT_TRUE(mem.read(0xff8, &v, 8).ok());
  EXPECT_EQ(mem.read(0xffc, &v, 8).error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(mem.read(0x1000, &v, 8).error().code, ErrorCode::OutOfRange);
}

TEST(BufferMemoryTest, WriteCrossesRegions) {
  BufferMemory mem = make_scrambled();
  const uint8_t data[4] = {0xde, 0xad, 0xbe, 0xef};
  mem.write(0xffe, data, sizeof data);
  EXPECT_EQ(mem.bytes()[0x2ffe], 0xde);
  EXPECT_EQ(mem.bytes()[0x2fff], 0xad);
  EXPECT_EQ(mem.bytes()[0x0], 0xbe);
  EXPECT_EQ(mem.bytes()[0x1], 0xef);
}

TEST(BufferMemoryDeathTest, WriteOutsideRamAborts) {
  EXPECT_DEATH(
      {
        BufferMemory mem(0x1000);
        mem.write_u64(0xffc, 1);
      },
      "not backed RAM");
}

}  // namespace
}  // namespace kt

// MmapMemory over a memfd laid out like QEMU's q35 split: a word written
// through write_word is what the shared mapping (QEMU's view) reads back,
// at the backing offset of its guest-physical address.
#include <sys/mman.h>
#include <unistd.h>

#include "kthost/introspect/backends.h"

namespace kt {
namespace {

TEST(MmapMemoryWrite, WordLandsInTheSharedBackingAtItsOffset) {
  int fd = ::memfd_create("kthost-test-ram", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  constexpr uint64_t kSize = 8 * kMiB;
  ASSERT_EQ(::ftruncate(fd, kSize), 0);
  // 4 MiB below the hole, 4 MiB at 4 GiB.
  PhysMap map({{0, 4 * kMiB, 0}, {4ull << 30, 4 * kMiB, 4 * kMiB}});
  auto mem = MmapMemory::open("/proc/self/fd/" + std::to_string(fd), map);
  ASSERT_TRUE(mem) << mem.error().message;
  void* view = ::mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(view, MAP_FAILED);
  const auto* bytes = static_cast<const uint8_t*>(view);

  ASSERT_TRUE((*mem)->write_word(0x1000, 0x1122334455667788ull));
  ASSERT_TRUE((*mem)->write_word((4ull << 30) + 0x2008, 42));
  uint64_t a = 0, b = 0;
  std::memcpy(&a, bytes + 0x1000, 8);
  std::memcpy(&b, bytes + 4 * kMiB + 0x2008, 8);
  EXPECT_EQ(a, 0x1122334455667788ull);
  EXPECT_EQ(b, 42u);
  uint64_t back = 0;
  ASSERT_TRUE((*mem)->read((4ull << 30) + 0x2008, &back, 8));
  EXPECT_EQ(back, 42u);

  auto unaligned = (*mem)->write_word(0x1004, 1);
  ASSERT_FALSE(unaligned);
  EXPECT_EQ(unaligned.error().code, ErrorCode::InvalidInput);
  auto hole = (*mem)->write_word(5 * kMiB, 1);
  ASSERT_FALSE(hole);
  EXPECT_EQ(hole.error().code, ErrorCode::OutOfRange);
  auto crossing = (*mem)->write_word(4 * kMiB - 4, 1);
  EXPECT_FALSE(crossing);
  ::munmap(view, kSize);
  ::close(fd);
}

TEST(MmapMemoryWrite, BackendsThatCannotWriteSaySo) {
  BufferMemory buffer(4096);
  EXPECT_TRUE(buffer.write_word(8, 7));
  struct ReadOnly final : GuestMemory {
    PhysMap map{std::vector<RamRegion>{{0, 4096, 0}}};
    Status read(uint64_t, void*, size_t) const override { return {}; }
    const PhysMap& phys_map() const override { return map; }
    std::string backend_name() const override { return "read-only"; }
  } ro;
  auto st = ro.write_word(8, 7);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::Unsupported);
  EXPECT_NE(st.error().message.find("read-only"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace kt
