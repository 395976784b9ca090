// kthost_shared.h is the one definition of the constants shared by the guest
// kit, the host and the PT plugin. C and C++ use its names; these tests check
// that no code spells a port name or plugin file name itself, and that the
// scripts, which cannot include a header, say exactly what it says.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kthost_shared.h"

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const fs::path kSource = KT_SOURCE_DIR;

// Every "org.kthost.X" string literal in C, C++ and header files, outside the header.
TEST(SharedConstants, NoCodeSpellsAPortNameItself) {
  std::vector<std::string> found;
  const std::regex literal(R"x("org\.kthost\.[A-Za-z0-9_.]*)x");
  size_t files = 0;
  for (const char* dir : {"host", "guest-kit", "pt-plugin", "tests"}) {
    for (const auto& e : fs::recursive_directory_iterator(kSource / dir)) {
      const auto ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".c" && ext != ".cpp" && ext != ".h")) continue;
      if (e.path().filename() == "kthost_shared.h" || e.path().filename() == "shared_constants_test.cpp") continue;
      ++files;
      const std::string text = read(e.path());
      for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it)
        found.push_back(fs::relative(e.path(), kSource).string() + ": " + it->str());
    }
  }
  EXPECT_GT(files, 100u);
  std::string all;
  for (const auto& f : found) all += f + "\n";
  EXPECT_TRUE(found.empty()) << "use KTHOST_PORT_* from kthost_shared.h:\n" << all;
}

// The scripts name exactly the header's ports, and both of them.
TEST(SharedConstants, ScriptsUseTheHeadersNames) {
  const std::set<std::string> ports = {KTHOST_PORT_SIDEBAND, KTHOST_PORT_EXEC};
  const std::regex name(R"(org\.kthost\.[A-Za-z0-9_]+)");
  struct Script {
    const char* path;
    std::set<std::string> must_name;
  };
  const std::vector<Script> scripts = {
      {"vm-images/ktvm", ports},
      {"vm-images/libvirt/kthost-libvirt.sh", ports},
      {"vm-images/init", {KTHOST_PORT_EXEC}},
      {"guest-kit/install/ktguest.service", {KTHOST_PORT_SIDEBAND}},
  };
  for (const Script& s : scripts) {
    const std::string text = read(kSource / s.path);
    ASSERT_FALSE(text.empty()) << s.path;
    std::set<std::string> named;
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) named.insert(it->str());
    for (const auto& n : named) EXPECT_TRUE(ports.count(n)) << s.path << " names " << n << ", not in kthost_shared.h";
    for (const auto& n : s.must_name) EXPECT_TRUE(named.count(n)) << s.path << " does not name " << n;
  }
}

// The plugin's files, as the end-to-end script reads them.
TEST(SharedConstants, PluginFileNamesAreTheOnesTheScriptsRead) {
  const std::string e2e = read(kSource / "tests/vm/run-pt-e2e.sh");
  ASSERT_FALSE(e2e.empty());
  EXPECT_NE(e2e.find(KTHOST_PT_FILE_STATS), std::string::npos);
  EXPECT_NE(e2e.find(KTHOST_PT_FILE_GROUND_TRUTH), std::string::npos);
  EXPECT_NE(e2e.find(KTHOST_PT_FILE_PREFIX), std::string::npos);
}

// Every text kind (ktguard_uapi.h defines its kinds from these) has its own name.
TEST(SharedConstants, EveryTextKindHasItsOwnName) {
  std::set<std::string> names;
  for (unsigned k = 1; k <= KTHOST_TEXT_GUARD_KIND_MAX; ++k) names.insert(kthost_text_kind_name(k));
  for (unsigned k : {KTHOST_TEXT_KSYMBOL_BPF, KTHOST_TEXT_KSYMBOL_OOL, KTHOST_TEXT_MODULE})
    names.insert(kthost_text_kind_name(k));
  EXPECT_EQ(names.size(), size_t{KTHOST_TEXT_GUARD_KIND_MAX} + 3);
  EXPECT_EQ(names.count("unknown"), 0u);
  EXPECT_STREQ(kthost_text_kind_name(0), "unknown");
  EXPECT_STREQ(kthost_text_kind_name(KTHOST_TEXT_GUARD_KIND_MAX + 1), "unknown");
}

}  // namespace
