// Symbols at one address: which name the Symbolizer gives the address, and
// the [base unknown] frame no address maps to.
#include <gtest/gtest.h>

#include "kthost/decode/symbolizer.h"

namespace kt {
namespace {

TEST(SymbolizerAliases, AFunctionsNameWinsOverSectionAndArrayMarkersAtItsAddress) {
  // As Debian 6.1's kallsyms lists the first retpoline thunk.
  Symbolizer s;
  ASSERT_TRUE(s.add_kallsyms("ffffffff81201580 T __x86_indirect_thunk_array\n"
                             "ffffffff81201580 T __x86_indirect_thunk_rax\n"
                             "ffffffff81201580 T __indirect_thunk_start\n"
                             "ffffffff81201580 T __static_call_text_end\n"
                             "ffffffff812015a0 T __x86_indirect_thunk_rcx\n",
                             "")
                  .ok());
  s.finalize();
  EXPECT_EQ(s.function(s.lookup(0xffffffff81201580ull, 0)).name, "__x86_indirect_thunk_rax");
  EXPECT_EQ(s.function(s.lookup(0xffffffff812015a0ull, 0)).name, "__x86_indirect_thunk_rcx");
}

TEST(SymbolizerAliases, BetweenTwoFunctionNamesTheLaterOneNamesTheAddress) {
  Symbolizer s;
  ASSERT_TRUE(s.add_kallsyms("ffffffff81000000 T first\nffffffff81000000 T second\nffffffff81000100 T next\n", "").ok());
  s.finalize();
  EXPECT_EQ(s.function(s.lookup(0xffffffff81000010ull, 0)).name, "second");
}

TEST(SymbolizerAliases, TheBaseUnknownFrameIsNoAddresssFunction) {
  Symbolizer s;
  ASSERT_TRUE(s.add_kallsyms("ffffffff81000000 T _stext\nffffffff81000000 T startup_64\nffffffff81000100 T x\n", "").ok());
  s.finalize();
  ASSERT_NE(s.base_unknown(), Symbolizer::kUnknown);
  EXPECT_EQ(s.function(s.base_unknown()).name, "[base unknown]");
  EXPECT_EQ(s.function(s.lookup(0xffffffff81000000ull, 0)).name, "startup_64");
  EXPECT_NE(s.lookup(0, 0), s.base_unknown());
}

}  // namespace
}  // namespace kt
