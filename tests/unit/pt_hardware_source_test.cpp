// The hardware source can only fail on this machine (no Intel PT): these
// tests check that it fails cleanly, says why, and leaves nothing behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "kthost/pt/hardware_source.h"
#include "pt_test_util.h"

namespace kt {
namespace {

const std::string kTree = std::string(KT_TEST_DATA_DIR) + "/intel_pt_sysfs";

std::vector<PtThread> this_thread_as_vcpu0() { return {{0, static_cast<pid_t>(::gettid())}}; }

// Where this machine has no intel_pt PMU, opening says so and writes
// nothing; where it has one (a lent PT host), "absent" would be a lie.
TEST(PtHardwareSource, SaysWhetherIntelPtIsOnThisMachine) {
  struct stat st {};
  bool has_pmu = ::stat(PtPmu::kDefaultDir, &st) == 0;
  testing::TempTree out;
  auto source = PtHardwareSource::open_system(PtConfig{}, this_thread_as_vcpu0(), out.root());
  if (has_pmu) {
    EXPECT_TRUE(source || source.error().message.find("absent") == std::string::npos) << source.error().message;
    return;
  }
  ASSERT_FALSE(source);
  EXPECT_EQ(source.error().code, ErrorCode::Unsupported);
  EXPECT_NE(source.error().message.find("intel_pt PMU absent"), std::string::npos) << source.error().message;
  EXPECT_TRUE(std::filesystem::is_empty(out.root()));
}

TEST(PtHardwareSource, MissingPmuDirectoryIsUnsupported) {
  testing::TempTree out;
  auto source = PtHardwareSource::open_system(PtConfig{}, this_thread_as_vcpu0(), out.root(), out.path("no-pmu"));
  ASSERT_FALSE(source);
  EXPECT_EQ(source.error().code, ErrorCode::Unsupported);
}

TEST(PtHardwareSource, PerfEventOpenFailureNamesThreadAndCause) {
  auto pmu = PtPmu::load(kTree);
  ASSERT_TRUE(pmu);
  pmu->type = 0x7ffffff0;  // no kernel has a PMU of this type
  testing::TempTree out;
  auto threads = this_thread_as_vcpu0();
  auto source = PtHardwareSource::open(*pmu, PtConfig{}, threads, out.root());
  ASSERT_FALSE(source);
  const std::string& msg = source.error().message;
  EXPECT_NE(msg.find("perf_event_open intel_pt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("thread " + std::to_string(threads[0].tid)), std::string::npos) << msg;
  // ENOENT (no such PMU) where perf is allowed; EACCES where it is not.
  EXPECT_TRUE(source.error().code == ErrorCode::Unsupported || source.error().code == ErrorCode::Io) << msg;
  EXPECT_TRUE(std::filesystem::is_empty(out.root()));
}

TEST(PtHardwareSource, RejectsBadArgumentsBeforeOpeningAnything) {
  auto pmu = PtPmu::load(kTree);
  ASSERT_TRUE(pmu);
  testing::TempTree out;
  auto source = PtHardwareSource::open(*pmu, PtConfig{}, {}, out.root());
  ASSERT_FALSE(source);
  EXPECT_EQ(source.error().code, ErrorCode::InvalidArgument);

  source = PtHardwareSource::open(*pmu, PtConfig{}, {{0, 100}, {0, 101}}, out.root());
  ASSERT_FALSE(source);
  EXPECT_NE(source.error().message.find("listed twice"), std::string::npos);

  PtConfig config;
  config.aux_bytes = 3u << 20;
  source = PtHardwareSource::open(*pmu, config, this_thread_as_vcpu0(), out.root());
  ASSERT_FALSE(source);
  EXPECT_NE(source.error().message.find("aux_bytes"), std::string::npos);

  config = PtConfig{};
  config.mtc_period = 1;  // not in mtc_periods
  source = PtHardwareSource::open(*pmu, config, this_thread_as_vcpu0(), out.root());
  ASSERT_FALSE(source);
  EXPECT_NE(source.error().message.find("mtc_period"), std::string::npos);
}

}  // namespace
}  // namespace kt
