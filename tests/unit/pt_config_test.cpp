#include <gtest/gtest.h>

#include "kthost/pt/config.h"

namespace kt {
namespace {

PtPmu captured_pmu() {
  auto pmu = PtPmu::load(std::string(KT_TEST_DATA_DIR) + "/intel_pt_sysfs");
  EXPECT_TRUE(pmu) << pmu.error().message;
  return std::move(pmu).value();
}

constexpr uint64_t bit(unsigned n) { return 1ull << n; }

TEST(PtConfig, DefaultsPlaceEachFieldAtItsFormatBits) {
  PtPmu pmu = captured_pmu();
  auto attr = build_intel_pt_attr(pmu, PtConfig{});
  ASSERT_TRUE(attr) << attr.error().message;
  // pt (passthrough), branch, tsc, noretcomp, mtc, mtc_period=3, psb_period=1 (4 KiB)
  uint64_t expected = bit(0) | bit(13) | bit(10) | bit(11) | bit(9) | (3ull << 14) | (1ull << 24);
  EXPECT_EQ(attr->config, expected) << std::hex << attr->config;
  EXPECT_EQ(attr->config1, 0u);
  EXPECT_EQ(attr->config2, 0u);
  EXPECT_EQ(attr->type, 8u);
  EXPECT_EQ(attr->size, sizeof(perf_event_attr));
  EXPECT_EQ(attr->disabled, 1u);
  EXPECT_EQ(attr->exclude_user, 1u);
  EXPECT_EQ(attr->exclude_kernel, 0u);
  EXPECT_EQ(attr->exclude_guest, 0u);
}

TEST(PtConfig, FollowsTheFormatFilesNotFixedBits) {
  PtPmu pmu = captured_pmu();
  pmu.formats["tsc"] = *parse_format_spec("tsc", "config1:40");
  pmu.formats["psb_period"] = *parse_format_spec("psb_period", "config2:0-1,8-9");
  PtConfig config;
  config.psb_period = 5;  // 0b101: bit 0 of the field at bit 0, bit 2 at bit 8
  auto attr = build_intel_pt_attr(pmu, config);
  ASSERT_TRUE(attr) << attr.error().message;
  EXPECT_EQ(attr->config & bit(10), 0u);
  EXPECT_EQ(attr->config1, bit(40));
  EXPECT_EQ(attr->config2, bit(0) | bit(8));
}

TEST(PtConfig, ChoicesCanBeTurnedOff) {
  PtPmu pmu = captured_pmu();
  PtConfig config;
  config.tsc = config.mtc = config.noretcomp = config.branch_en = config.kernel_only = false;
  config.psb_period = 0;
  auto attr = build_intel_pt_attr(pmu, config);
  ASSERT_TRUE(attr) << attr.error().message;
  EXPECT_EQ(attr->config, bit(0));  // passthrough alone: branch tracing off
  EXPECT_EQ(attr->exclude_user, 0u);
}

TEST(PtConfig, MtcPeriodMustBeInTheCapsBitmap) {
  PtPmu pmu = captured_pmu();  // mtc_periods 249: 0, 3, 6, 9
  PtConfig config;
  config.mtc_period = 6;
  EXPECT_TRUE(build_intel_pt_attr(pmu, config));
  config.mtc_period = 2;
  auto attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_EQ(attr.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(attr.error().message.find("mtc_periods"), std::string::npos) << attr.error().message;
  EXPECT_NE(attr.error().message.find("0,3,6,9"), std::string::npos) << attr.error().message;
  config.mtc_period = 40;
  EXPECT_FALSE(build_intel_pt_attr(pmu, config));
  pmu.caps["mtc"] = 0;
  config.mtc_period = 3;
  attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_EQ(attr.error().code, ErrorCode::Unsupported);
}

TEST(PtConfig, CycNeedsPsbCycAndAListedThreshold) {
  PtPmu pmu = captured_pmu();
  PtConfig config;
  config.cyc = true;
  config.cyc_threshold = 4;
  auto attr = build_intel_pt_attr(pmu, config);
  ASSERT_TRUE(attr) << attr.error().message;
  EXPECT_EQ(attr->config & (bit(1) | (0xfull << 19)), bit(1) | (4ull << 19));

  config.cyc_threshold = 14;  // cycle_thresholds 3fff: 0..13
  attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_NE(attr.error().message.find("cycle_thresholds"), std::string::npos) << attr.error().message;

  config.cyc = false;
  config.cyc_threshold = 2;
  EXPECT_FALSE(build_intel_pt_attr(pmu, config));

  pmu.caps["psb_cyc"] = 0;
  config.cyc = true;
  config.cyc_threshold = 0;
  attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_EQ(attr.error().code, ErrorCode::Unsupported);
  EXPECT_NE(attr.error().message.find("psb_cyc"), std::string::npos) << attr.error().message;
}

TEST(PtConfig, PsbPeriodDefaultFallsBackWithoutPsbCyc) {
  PtPmu pmu = captured_pmu();
  pmu.caps["psb_cyc"] = 0;
  auto attr = build_intel_pt_attr(pmu, PtConfig{});
  ASSERT_TRUE(attr) << attr.error().message;
  EXPECT_EQ(attr->config & (0xfull << 24), 0u);  // the hardware's default
  PtConfig config;
  config.psb_period = 2;
  attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_EQ(attr.error().code, ErrorCode::Unsupported);

  pmu = captured_pmu();
  config.psb_period = 6;  // psb_periods 3f: 0..5
  attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_NE(attr.error().message.find("psb_periods"), std::string::npos) << attr.error().message;
}

TEST(PtConfig, BranchOffNeedsThePassthroughBit) {
  PtPmu pmu = captured_pmu();
  pmu.formats.erase("pt");
  auto attr = build_intel_pt_attr(pmu, PtConfig{});
  ASSERT_TRUE(attr) << attr.error().message;
  // Old kernels: branch tracing is implied and the branch bit would be rejected.
  EXPECT_EQ(attr->config & (bit(0) | bit(13)), 0u);
  PtConfig config;
  config.branch_en = false;
  attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_EQ(attr.error().code, ErrorCode::Unsupported);
}

TEST(PtConfig, MissingFormatFieldIsUnsupportedAndNamed) {
  PtPmu pmu = captured_pmu();
  pmu.formats.erase("noretcomp");
  auto attr = build_intel_pt_attr(pmu, PtConfig{});
  ASSERT_FALSE(attr);
  EXPECT_EQ(attr.error().code, ErrorCode::Unsupported);
  EXPECT_NE(attr.error().message.find("format/noretcomp"), std::string::npos) << attr.error().message;
}

TEST(PtConfig, ValueWiderThanItsFieldIsRejected) {
  PtPmu pmu = captured_pmu();
  pmu.formats["mtc_period"] = *parse_format_spec("mtc_period", "config:14-15");
  PtConfig config;
  config.mtc_period = 9;
  pmu.caps["mtc_periods"] = 0x249;
  auto attr = build_intel_pt_attr(pmu, config);
  ASSERT_FALSE(attr);
  EXPECT_EQ(attr.error().code, ErrorCode::InvalidArgument);
}

TEST(PtConfig, RingSizesArePowersOfTwoPages) {
  PtConfig config;
  EXPECT_TRUE(validate_ring_sizes(config, 4096));
  config.aux_bytes = 3u << 20;
  EXPECT_FALSE(validate_ring_sizes(config, 4096));
  config.aux_bytes = 2048;
  EXPECT_FALSE(validate_ring_sizes(config, 4096));
  config.aux_bytes = 1u << 20;
  config.data_bytes = 0;
  EXPECT_FALSE(validate_ring_sizes(config, 4096));
}

}  // namespace
}  // namespace kt
