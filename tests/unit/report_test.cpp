// Reports and diff over a synthetic trace with known counts: tables, JSON,
// the flame graph SVG (valid XML, rendered when rsvg-convert exists), and
// kthost diff's detection.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kthost/common/io.h"
#include "kthost/decode/analysis.h"
#include "kthost/decode/report.h"
#include "synthetic_bundle.h"

namespace kt {
namespace {

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::make_temp_dir("report");
    test::SynthBundle b;
    b.text.push_back(test::text_record(TextSource::Snapshot, 0, test::kText, test::core_text(0x1000)));
    b.kallsyms = test::core_kallsyms();
    test::PtWriter w0, w1;
    w0.psb(100);
    test::walk(w0, test::main_program(), test::kMain, test::main_decisions());
    w1.psb(100);
    test::walk(w1, test::g_program(false), test::kG, [](uint64_t) { return false; });
    b.pt[0] = w0.finish();
    b.pt[1] = w1.finish();
    b.write(dir_ + "/b");
    auto a = open_analysis(dir_ + "/b");
    ASSERT_TRUE(a.ok()) << a.error().message;
    a_ = std::make_unique<Analysis>(std::move(*a));
    DecodeOptions o;
    o.threads = 2;
    auto p = decode_profile(a_->bundle.pt, *a_->image, a_->symbols, o);
    ASSERT_TRUE(p.ok());
    p_ = std::move(*p);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::unique_ptr<Analysis> a_;
  Profile p_;
};

TEST_F(ReportTest, TextTableHasExactCountsAndShares) {
  ReportOptions o;
  o.callgraph = true;
  o.coverage = true;
  std::string t = format_report_text(p_, a_->symbols, o);
  EXPECT_NE(t.find("23 instructions"), std::string::npos) << t;
  EXPECT_NE(t.find("cpu0: 20 instructions"), std::string::npos) << t;
  EXPECT_NE(t.find("            14          0  60.87%           14            0  main_func"), std::string::npos) << t;
  EXPECT_NE(t.find("             6          3  26.09%            6            0  f_func"), std::string::npos) << t;
  EXPECT_NE(t.find("             3          0  13.04%            0            3  g_func"), std::string::npos) << t;
  EXPECT_NE(t.find("         3  main_func -> f_func"), std::string::npos) << t;
  // Blocks: main_func +0, +2 (after the taken jne), +7 (after each return),
  // +0e (after the last jne); f_func +0; g_func +0.
  EXPECT_NE(t.find("  kernel                          3 functions          6 blocks             23 instructions"),
            std::string::npos) << t;
  EXPECT_EQ(p_.blocks_seen.size(), 6u);
  o.cpu = 1;
  t = format_report_text(p_, a_->symbols, o);
  EXPECT_NE(t.find("             3          0 100.00%  g_func"), std::string::npos) << t;
}

TEST_F(ReportTest, JsonReportRoundTripsIntoDiff) {
  ReportOptions o;
  o.coverage = true;
  std::string j = format_report_json(p_, a_->symbols, o, {});
  auto doc = nlohmann::json::parse(j);
  EXPECT_EQ(doc["insns"], 23);
  EXPECT_EQ(doc["functions"][0]["name"], "main_func");
  EXPECT_EQ(doc["functions"][0]["insns"], 14);
  EXPECT_EQ(doc["functions"][1]["calls"], 3);
  EXPECT_EQ(doc["coverage"]["kernel"]["functions"], 3);
  auto s = parse_report_json(j, "r.json");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->functions.at("main_func").insns, 14u);
  ProfileSummary direct = summarize(p_, a_->symbols);
  EXPECT_EQ(s->insns, direct.insns);
  EXPECT_EQ(s->blocks_covered, direct.blocks_covered);
  ASSERT_EQ(s->functions.size(), direct.functions.size());
  for (const auto& [k, f] : direct.functions) {
    EXPECT_EQ(s->functions.at(k).insns, f.insns) << k;
    EXPECT_EQ(s->functions.at(k).calls, f.calls) << k;
  }
}

TEST_F(ReportTest, FlameGraphIsValidXmlAndRenders) {
  std::string svg = flamegraph_svg(p_, a_->symbols, "test <&> \"flame\"");
  // Inclusive: main_func's own 14 and f_func's 6, of 23.
  EXPECT_NE(svg.find("main_func (20 instructions, 86.96%)"), std::string::npos);
  EXPECT_NE(svg.find("f_func (6 instructions, 26.09%)"), std::string::npos);
  EXPECT_NE(svg.find("&lt;&amp;&gt;"), std::string::npos);
  std::string file = dir_ + "/flame.svg";
  ASSERT_TRUE(write_file_atomic(file, svg));
  if (std::system("command -v xmllint >/dev/null 2>&1") != 0) GTEST_SKIP() << "xmllint not installed";
  EXPECT_EQ(std::system(("xmllint --noout " + file).c_str()), 0);
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0) GTEST_SKIP() << "rsvg-convert not installed";
  std::string png = dir_ + "/flame.png";
  EXPECT_EQ(std::system(("rsvg-convert -o " + png + " " + file).c_str()), 0);
  EXPECT_GT(std::filesystem::file_size(png), 1000u);
}

TEST_F(ReportTest, BadReportJsonIsAnError) {
  EXPECT_FALSE(parse_report_json("{", "x").ok());
  EXPECT_FALSE(parse_report_json(R"({"format":"kthost-report","insns":1})", "x").ok());
  auto e = parse_report_json(R"({"format":"kthost-report","insns":1,"coverage_summary":{"blocks":1},
                                 "functions":[{"key":"a"}]})", "r.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("r.json: functions[0]"), std::string::npos);
}

}  // namespace

// A function this file defines, for the DWARF test to find by address.
__attribute__((noinline)) int dwarf_probe_function(int x) { return x * 3 + 1; }

namespace {

// The test binary is built with -g: libdw gives this file's name for a
// function defined here (PIE: the file address is the runtime one minus the base).
TEST(SymbolizerDwarfTest, SourceLineFromDebugInfo) {
  Symbolizer s;
  auto st = s.load_dwarf("/proc/self/exe");
  if (!st) GTEST_SKIP() << st.error().message;
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&dwarf_probe_function), &info), 0);
  uint64_t addr = reinterpret_cast<uintptr_t>(&dwarf_probe_function);
  auto line = s.source_line(addr - reinterpret_cast<uintptr_t>(info.dli_fbase));
  if (!line) line = s.source_line(addr);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("report_test.cpp:"), std::string::npos) << *line;
  EXPECT_FALSE(s.load_dwarf("/nonexistent/vmlinux").ok());
}

}  // namespace
}  // namespace kt
