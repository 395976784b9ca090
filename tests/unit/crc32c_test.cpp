// kt::crc32c (kt_common: SSE4.2 or slicing-by-8) against the sideband codec's
// ktp_crc32c (guest-kit/proto: its own tables): two implementations that share
// no code must agree on every length and alignment, and on the standard check
// value.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kthost/common/crc32c.h"
#include "ktproto.h"

namespace {

TEST(Crc32c, KnownVectorAndEmpty) {
  EXPECT_EQ(kt::crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(kt::crc32c_portable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(kt::crc32c(0, "", 0), 0u);
}

TEST(Crc32c, AgreesWithTheCodecOnEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(4096 + 16);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 16; ++off)
    for (size_t len : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{64}, size_t{1000},
                       size_t{4096}}) {
      const uint32_t want = ktp_crc32c(0, data.data() + off, len);
      ASSERT_EQ(kt::crc32c(0, data.data() + off, len), want) << off << "+" << len;
      ASSERT_EQ(kt::crc32c_portable(0, data.data() + off, len), want) << off << "+" << len;
    }
}

TEST(Crc32c, Chains) {
  const std::string s = "the quick brown fox jumps over the lazy dog, twice over";
  for (size_t cut = 0; cut <= s.size(); ++cut)
    EXPECT_EQ(kt::crc32c(kt::crc32c(0, s.data(), cut), s.data() + cut, s.size() - cut), kt::crc32c(0, s.data(), s.size()));
}

}  // namespace
