#include <gtest/gtest.h>

#include "kthost/pt/pmu.h"
#include "pt_test_util.h"

namespace kt {
namespace {

const std::string kTree = std::string(KT_TEST_DATA_DIR) + "/intel_pt_sysfs";

TEST(PtPmu, LoadsTheReconstructedTree) {
  auto pmu = PtPmu::load(kTree);
  ASSERT_TRUE(pmu) << pmu.error().message;
  EXPECT_EQ(pmu->type, 8u);
  EXPECT_EQ(pmu->formats.size(), 14u);
  const PmuFormatField* mtc_period = pmu->format("mtc_period");
  ASSERT_NE(mtc_period, nullptr);
  EXPECT_EQ(mtc_period->word, ConfigWord::Config);
  ASSERT_EQ(mtc_period->ranges.size(), 1u);
  EXPECT_EQ(mtc_period->ranges[0].low, 14u);
  EXPECT_EQ(mtc_period->ranges[0].high, 17u);
  EXPECT_EQ(pmu->format("notnt")->ranges[0].low, 55u);
  EXPECT_EQ(pmu->cap("mtc_periods"), 0x249u);
  EXPECT_EQ(pmu->cap("cycle_thresholds"), 0x3fffu);
  EXPECT_EQ(pmu->cap("psb_periods"), 0x3fu);
  EXPECT_EQ(pmu->cap("num_address_ranges"), 2u);
  EXPECT_EQ(pmu->cap("no_such_cap"), 0u);
  ASSERT_TRUE(pmu->max_nonturbo_ratio);
  EXPECT_EQ(*pmu->max_nonturbo_ratio, 34u);
  ASSERT_TRUE(pmu->tsc_art_ratio);
  EXPECT_EQ(pmu->tsc_art_ratio->first, 176u);
  EXPECT_EQ(pmu->tsc_art_ratio->second, 2u);
}

TEST(PtPmu, AbsentDirectoryIsUnsupported) {
  auto pmu = PtPmu::load("/nonexistent/intel_pt");
  ASSERT_FALSE(pmu);
  EXPECT_EQ(pmu.error().code, ErrorCode::Unsupported);
  EXPECT_NE(pmu.error().message.find("intel_pt PMU absent"), std::string::npos);
}

TEST(PtPmu, ParsesMultiRangeFieldsLowBitsFirst) {
  auto field = parse_format_spec("split", "config2:0-7,32-35\n");
  ASSERT_TRUE(field) << field.error().message;
  EXPECT_EQ(field->word, ConfigWord::Config2);
  EXPECT_EQ(field->width(), 12u);
  EXPECT_EQ(field->max_value(), 0xfffu);
  uint64_t word = 0;
  ASSERT_TRUE(field->place(0xabc, word));
  EXPECT_EQ(word, 0xbcull | (0xaull << 32));
  uint64_t untouched = 0;
  auto too_big = field->place(0x1000, untouched);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, ErrorCode::InvalidArgument);
  EXPECT_EQ(untouched, 0u);

  auto whole = parse_format_spec("all", "config1:0-63");
  ASSERT_TRUE(whole);
  uint64_t all = 0;
  ASSERT_TRUE(whole->place(~0ull, all));
  EXPECT_EQ(all, ~0ull);
}

TEST(PtPmu, RejectsMalformedFormatSpecs) {
  for (const char* bad : {"", "config", "config:", "config:64", "config:5-3", "config:-1", "config:1-",
                          "conf:0", "config3:0", "config:0,0", "config:0-7,4", "config:0x1", "config:1 2",
                          "config:99999999999999999999"}) {
    auto field = parse_format_spec("f", bad);
    EXPECT_FALSE(field) << "accepted \"" << bad << "\"";
    if (!field) {
      EXPECT_EQ(field.error().code, ErrorCode::InvalidInput);
    }
  }
}

TEST(PtPmu, ParsesCapsAsTheKernelPrintsThem) {
  EXPECT_EQ(*parse_cap_value("249\n"), 0x249u);
  EXPECT_EQ(*parse_cap_value("ffffffff"), 0xffffffffu);
  EXPECT_EQ(*parse_cap_value("0"), 0u);
  for (const char* bad : {"", "\n", "0x249", "xyz", "100000000", "-1", "12 34"})
    EXPECT_FALSE(parse_cap_value(bad)) << "accepted \"" << bad << "\"";
}

TEST(PtPmu, MalformedFileErrorNamesTheFile) {
  testing::TempTree tree;
  tree.copy(kTree, "intel_pt");
  tree.write("intel_pt/format/tsc", "config:70\n");
  auto pmu = PtPmu::load(tree.path("intel_pt"));
  ASSERT_FALSE(pmu);
  EXPECT_EQ(pmu.error().code, ErrorCode::InvalidInput);
  EXPECT_NE(pmu.error().message.find("intel_pt/format/tsc"), std::string::npos) << pmu.error().message;

  tree.write("intel_pt/format/tsc", "config:10\n");
  tree.write("intel_pt/caps/mtc_periods", "0x249\n");
  pmu = PtPmu::load(tree.path("intel_pt"));
  ASSERT_FALSE(pmu);
  EXPECT_NE(pmu.error().message.find("caps/mtc_periods"), std::string::npos) << pmu.error().message;

  tree.write("intel_pt/caps/mtc_periods", "249\n");
  tree.write("intel_pt/type", "eight\n");
  pmu = PtPmu::load(tree.path("intel_pt"));
  ASSERT_FALSE(pmu);
  EXPECT_NE(pmu.error().message.find("intel_pt/type"), std::string::npos) << pmu.error().message;

  tree.write("intel_pt/type", "8\n");
  tree.write("intel_pt/tsc_art_ratio", "176\n");
  pmu = PtPmu::load(tree.path("intel_pt"));
  ASSERT_FALSE(pmu);
  EXPECT_NE(pmu.error().message.find("tsc_art_ratio"), std::string::npos) << pmu.error().message;
}

TEST(PtPmu, OversizedFileIsALimitNotARead) {
  testing::TempTree tree;
  tree.copy(kTree, "intel_pt");
  tree.write("intel_pt/caps/psb_periods", std::string(PtPmu::kMaxFileBytes + 1, '1'));
  auto pmu = PtPmu::load(tree.path("intel_pt"));
  ASSERT_FALSE(pmu);
  EXPECT_EQ(pmu.error().code, ErrorCode::LimitExceeded);
}

TEST(PtPmu, MissingTypeOrFormatDirIsAnError) {
  testing::TempTree tree;
  tree.mkdir("intel_pt/caps");
  tree.mkdir("intel_pt/format");
  auto pmu = PtPmu::load(tree.path("intel_pt"));
  ASSERT_FALSE(pmu);
  EXPECT_NE(pmu.error().message.find("intel_pt/type"), std::string::npos) << pmu.error().message;
}

}  // namespace
}  // namespace kt
