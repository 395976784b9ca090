// The symbolizer against a guest kallsyms older than its module list (the
// guest's symbol cache is read only while no host listens): symbols of an
// unloaded module, or of a freed init section whose memory a later module
// took, must not name that later module's code.
#include <gtest/gtest.h>

#include "kthost/decode/symbolizer.h"

namespace kt {
namespace {

// Read at boot: ktguard's init text at ...63000, then freed; "gone" unloaded since.
const char* kOldKallsyms =
    "ffffffff81000000 T _stext\n"
    "ffffffff81000100 T core_fn\n"
    "ffffffffc0363000 T ktg_init\t[ktguard]\n"
    "ffffffffc0380000 t gone_fn\t[gone]\n"
    "ffffffffc0397000 T ktg_guard\t[ktguard]\n"
    "ffffffffc0397400 t ktg_other\t[ktguard]\n";
// Now: ktregress sits where ktguard's init was.
const char* kModules =
    "ktregress 16384 0 - Live 0xffffffffc0363000\n"
    "ktguard 49152 0 - Live 0xffffffffc0397000\n";

TEST(SymbolizerStale, AFreedInitSectionDoesNotNameTheModuleNowThere) {
  Symbolizer s;
  ASSERT_TRUE(s.add_kallsyms(kOldKallsyms, kModules).ok());
  s.finalize();
  const auto& f = s.function(s.lookup(0xffffffffc0363010, 0));
  EXPECT_EQ(f.name, "[unknown]");
  EXPECT_EQ(f.module, "ktregress");
  EXPECT_EQ(s.stale_symbols().dropped, 2u);  // ktg_init (another module's range) and gone_fn (unlisted)
  EXPECT_EQ(s.stale_symbols().modules_without_symbols, std::vector<std::string>{"ktregress"});
}

TEST(SymbolizerStale, LiveSymbolsStayAndEndWithTheirModule) {
  Symbolizer s;
  ASSERT_TRUE(s.add_kallsyms(kOldKallsyms, kModules).ok());
  s.finalize();
  EXPECT_EQ(s.function(s.lookup(0xffffffffc0397010, 0)).name, "ktg_guard");
  EXPECT_EQ(s.function(s.lookup(0xffffffffc0397410, 0)).name, "ktg_other");
  EXPECT_EQ(s.function(s.lookup(0xffffffff81000110, 0)).name, "core_fn");
  // ktguard's last symbol does not run past its module's 48 KiB.
  EXPECT_EQ(s.function(s.lookup(0xffffffffc03a3000, 0)).name, "[unknown]");
  // The core kernel's last symbol does not reach module space.
  EXPECT_EQ(s.function(s.lookup(0xffffffffc0000000, 0)).name, "[unknown]");
}

TEST(SymbolizerStale, AFreshKallsymsLosesNothing) {
  Symbolizer s;
  ASSERT_TRUE(s.add_kallsyms("ffffffff81000000 T _stext\n"
                             "ffffffffc0363000 t ktregress_work\t[ktregress]\n"
                             "ffffffffc0397000 T ktg_guard\t[ktguard]\n",
                             kModules)
                  .ok());
  s.finalize();
  EXPECT_EQ(s.function(s.lookup(0xffffffffc0363010, 0)).name, "ktregress_work");
  EXPECT_EQ(s.stale_symbols().dropped, 0u);
  EXPECT_TRUE(s.stale_symbols().modules_without_symbols.empty());
}

}  // namespace
}  // namespace kt
