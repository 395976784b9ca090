// The versioned text image on its own: bytes at (address, time), pokes at
// the same time sharing a version, and a poke storm that does not fit
// libipt's section cache coalesced by a time quantum.
#include <gtest/gtest.h>
#include <intel-pt.h>

#include "kthost/decode/image.h"

namespace kt {
namespace {

constexpr uint64_t kBase = 0xffffffff81000000ull;

uint8_t byte_at(const VersionedImage& im, uint64_t addr, uint64_t time) {
  uint8_t b = 0;
  EXPECT_EQ(im.read(addr, time, &b, 1), 1u);
  return b;
}

TEST(VersionedImageTest, BytesAtAddressAndTime) {
  VersionedImage im;
  im.add_mapping(kBase, std::vector<uint8_t>(0x1000, 0x90), 0, kTimeForever, "test");
  im.add_poke(kBase + 0x10, {0x90}, {0xcc}, 100);
  im.add_poke(kBase + 0x10, {0xcc}, {0xc3}, 200);
  im.add_poke(kBase + 0x20, {0x90}, {0xc3}, 200);  // same time: same version
  ASSERT_TRUE(im.finalize());
  EXPECT_EQ(im.versions().size(), 3u);
  EXPECT_EQ(im.stats().pokes_old_mismatch, 0u);
  EXPECT_EQ(byte_at(im, kBase + 0x10, 99), 0x90);
  EXPECT_EQ(byte_at(im, kBase + 0x10, 100), 0xcc);
  EXPECT_EQ(byte_at(im, kBase + 0x10, 200), 0xc3);
  EXPECT_EQ(byte_at(im, kBase + 0x20, 199), 0x90);
  EXPECT_EQ(byte_at(im, kBase + 0x20, 5000), 0xc3);
  uint8_t b;
  EXPECT_EQ(im.read(kBase + 0x1000, 0, &b, 1), 0u);
}

// A decoder thread's own section cache reads the same bytes through the same
// isids as the shared one (so block isids map to the same versions).
TEST(VersionedImageTest, AThreadsOwnSectionCacheHasTheSameIsidsAndBytes) {
  VersionedImage im;
  im.add_mapping(kBase, std::vector<uint8_t>(0x1000, 0x90), 0, kTimeForever, "test");
  im.add_mapping(kBase + 0x10000, std::vector<uint8_t>(0x100, 0xc3), 50, kTimeForever, "load");
  im.add_poke(kBase + 0x10, {0x90}, {0xcc}, 100);
  ASSERT_TRUE(im.finalize());
  auto own = im.make_thread_iscache();
  ASSERT_TRUE(own) << own.error().message;
  ASSERT_NE(*own, im.iscache());
  for (const auto& v : im.versions()) {
    uint8_t a = 0, b = 0;
    ASSERT_EQ(pt_iscache_read(im.iscache(), &a, 1, v.isid, v.start), 1);
    ASSERT_EQ(pt_iscache_read(*own, &b, 1, v.isid, v.start), 1);
    EXPECT_EQ(a, b) << "version at " << std::hex << v.start;
  }
  pt_iscache_free(*own);
}

TEST(VersionedImageTest, OldBytesThatDoNotMatchAreCounted) {
  VersionedImage im;
  im.add_mapping(kBase, std::vector<uint8_t>(16, 0x90), 0, kTimeForever, "test");
  im.add_poke(kBase, {0x0f, 0x1f}, {0xe9, 0x00}, 10);
  im.add_poke(kBase + 0x100000, {}, {0xcc}, 10);  // no text there
  ASSERT_TRUE(im.finalize());
  EXPECT_EQ(im.stats().pokes_old_mismatch, 1u);
  EXPECT_EQ(im.stats().pokes_unmapped, 1u);
}

TEST(VersionedImageTest, PokeStormIsCoalescedToFitLibipt) {
  VersionedImage im;
  constexpr uint64_t kSize = 8u << 20;
  im.add_mapping(kBase, std::vector<uint8_t>(kSize, 0x90), 0, kTimeForever, "test");
  constexpr int kPokes = 70000;
  for (int i = 0; i < kPokes; ++i)
    im.add_poke(kBase + (static_cast<uint64_t>(i) * 4099) % kSize, {}, {0xcc}, 1000 + static_cast<uint64_t>(i));
  ASSERT_TRUE(im.finalize());
  EXPECT_LE(im.versions().size(), 60000u);
  EXPECT_GT(im.stats().poke_quantum, 0u);
  // After the storm every poked byte is there; before it, none.
  for (int i = 0; i < kPokes; i += 997) {
    uint64_t a = kBase + (static_cast<uint64_t>(i) * 4099) % kSize;
    EXPECT_EQ(byte_at(im, a, kTimeForever - 1), 0xcc);
    EXPECT_EQ(byte_at(im, a, 999), 0x90);
  }
}

}  // namespace
}  // namespace kt
