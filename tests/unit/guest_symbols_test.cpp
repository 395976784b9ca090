#include <gtest/gtest.h>

#include "kthost/introspect/guest_symbols.h"

namespace kt {
namespace {

TEST(GuestSymbols, ParsesKallsymsWithModulesAndBpf) {
  GuestSymbols s;
  ASSERT_TRUE(s.parse_kallsyms(
      "ffffffff81000000 T _stext\n"
      "ffffffff81000000 T _text\n"
      "ffffffffc0a01000 t dummy_dev_init\t[dummy]\n"
      "ffffffffc0002000 t bpf_prog_6deef7357e7b4530_sock\t[bpf]\n"
      "ffffffff81e00000 T _etext\n"));
  ASSERT_EQ(s.symbols.size(), 5u);
  EXPECT_EQ(s.symbols.front().address, 0xffffffff81000000ull);
  EXPECT_EQ(s.find("dummy_dev_init")->module, "dummy");
  EXPECT_EQ(s.find("bpf_prog_6deef7357e7b4530_sock")->module, "bpf");
  EXPECT_EQ(s.symbol_at(0xffffffff81000010ull)->address, 0xffffffff81000000ull);
  EXPECT_EQ(s.symbol_at(0x1000), nullptr);
  EXPECT_EQ(s.skipped_lines, 0u);
}

TEST(GuestSymbols, CountsMalformedLinesInsteadOfTrustingThem) {
  GuestSymbols s;
  std::string hostile = "zzzz T bad_addr\n"
                        "ffffffff81000000 TT two_letter_type\n"
                        "ffffffff81000000 T\n"
                        "ffffffff81000000 T name\x01with_control\n"
                        "ffffffff81000000 T ok [unterminated\n"
                        "ffffffff81000000 T " + std::string(600, 'a') + "\n"
                        "ffffffff81000010 T good\n";
  ASSERT_TRUE(s.parse_kallsyms(hostile));
  EXPECT_EQ(s.symbols.size(), 1u);
  EXPECT_EQ(s.skipped_lines, 6u);
}

TEST(GuestSymbols, ParsesModules) {
  GuestSymbols s;
  ASSERT_TRUE(s.parse_modules(
      "dummy 16384 0 - Live 0xffffffffc0a00000\n"
      "virtio_console 45056 0 - Live 0xffffffffc0980000 (E)\n"
      "broken 12 0 - Live nothex\n"
      "wraps 4096 0 - Live 0xfffffffffffff000\n"));
  ASSERT_EQ(s.modules.size(), 2u);
  EXPECT_EQ(s.modules[0].name, "virtio_console");
  EXPECT_EQ(s.modules[1].base, 0xffffffffc0a00000ull);
  EXPECT_EQ(s.modules[1].size, 16384u);
  EXPECT_EQ(s.skipped_lines, 2u);
}

}  // namespace
}  // namespace kt
