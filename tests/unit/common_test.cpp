#include <gtest/gtest.h>

#include "kthost/common/sha256.h"
#include "kthost/common/strings.h"

namespace kt {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256::hex_digest("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256::hex_digest("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(Sha256::hex_digest(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Incremental updates of odd sizes give the same digest as one update.
  std::string million(1000000, 'a');
  Sha256 s;
  for (size_t i = 0; i < million.size(); i += 777) s.update(million.data() + i, std::min<size_t>(777, million.size() - i));
  auto d = s.finish();
  EXPECT_EQ(hex_bytes(d.data(), d.size()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Strings, StrictNumberParsing) {
  EXPECT_EQ(parse_u64("0x10"), 16u);
  EXPECT_EQ(parse_u64("10"), 10u);
  EXPECT_EQ(parse_u64("ff", 16), 255u);
  EXPECT_FALSE(parse_u64(""));
  EXPECT_FALSE(parse_u64("0x"));
  EXPECT_FALSE(parse_u64("12z"));
  EXPECT_FALSE(parse_u64("99999999999999999999999"));
  EXPECT_EQ(*parse_hex_bytes("0f1F"), (std::vector<uint8_t>{0x0f, 0x1f}));
  EXPECT_FALSE(parse_hex_bytes("0f1"));
  EXPECT_FALSE(parse_hex_bytes("zz"));
  EXPECT_EQ(sanitize_name("a\x01" "b\xff", 10), "a?b?");
  EXPECT_EQ(sanitize_name(std::string(20, 'x'), 5), "xxxxx");
}

TEST(Strings, ByteSizesOfOptions) {
  EXPECT_EQ(*parse_byte_size("10G", "--x"), 10ull << 30);
  EXPECT_EQ(*parse_byte_size("512m", "--x"), 512ull << 20);
  EXPECT_EQ(*parse_byte_size("4096", "--x"), 4096u);
  for (const char* bad : {"", "G", "-1", "1.5G", "99999999999999999999", "16777216T"}) {
    auto v = parse_byte_size(bad, "--max-disk");
    ASSERT_FALSE(v) << bad;
    EXPECT_NE(v.error().message.find("--max-disk"), std::string::npos);
  }
}

}  // namespace
}  // namespace kt
