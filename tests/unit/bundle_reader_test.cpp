// read_bundle on hand-written manifests: names that are not pt/cpuN.pt.
#include <gtest/gtest.h>

#include <filesystem>

#include "kthost/bundle/bundle.h"
#include "kthost/common/io.h"
#include "synthetic_bundle.h"

namespace kt {
namespace {

TEST(BundleReaderTest, PtFileNamesAreCheckedBeforeUse) {
  std::string dir = test::make_temp_dir("bundle-names");
  std::filesystem::create_directories(dir + "/pt");
  for (const char* name : {"pt/x", "pt/cpu.pt", "pt/cpuX.pt", "pt/cpu99999999.pt", "pt/gpu0.pt"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(write_file_atomic(dir + "/" + name, ""));
    std::string manifest = std::string(R"({"format":"kthost-bundle","version":1,"clock":{"perf_to_tsc":"identity"},)") +
                           R"("cpus":[],"flush_seq":1,"files":{")" + name + R"(":{"size":0}}})";
    ASSERT_TRUE(write_file_atomic(dir + "/manifest.json", manifest));
    auto b = read_bundle(dir);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.error().message.find("a PT file must be named pt/cpuN.pt"), std::string::npos) << b.error().message;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kt
