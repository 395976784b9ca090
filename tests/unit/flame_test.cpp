// kt_flame: folded stacks read back with every bound checked, and the SVGs.
#include <gtest/gtest.h>

#include "kthost/flame/flame.h"

namespace kt {
namespace {

TEST(Folded, RoundTripsAndAddsRepeatedStacks) {
  auto s = parse_folded("a;b 3\na 4\r\n\na;b 2\nx_[mod];y z 1\n", "t.folded");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->stacks.at("a;b"), 5u);
  EXPECT_EQ(s->stacks.at("x_[mod];y z"), 1u);  // a space inside a frame: the count is after the last one
  EXPECT_EQ(s->total(), 10u);
  EXPECT_EQ(format_folded(*s), "a 4\na;b 5\nx_[mod];y z 1\n");
  auto again = parse_folded(format_folded(*s), "again");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->stacks, s->stacks);
}

void expect_bad(const std::string& text, const std::string& what) {
  auto s = parse_folded(text, "in.folded");
  ASSERT_FALSE(s) << text;
  EXPECT_EQ(s.error().code, ErrorCode::InvalidInput);
  EXPECT_NE(s.error().message.find(what), std::string::npos) << s.error().message;
}

TEST(Folded, EachKindOfBadLineIsNamedWithItsLine) {
  expect_bad("a 1\nb\n", "in.folded:2: no count");
  expect_bad("a x1\n", "in.folded:1: count \"x1\" is not a number");
  expect_bad("a 99999999999999999999\n", "is not a number");
  expect_bad("a;;b 1\n", "in.folded:1: empty frame name");
  expect_bad(";a 1\n", "empty frame name");
  expect_bad("a; 1\n", "empty frame name");
  expect_bad(" 1\n", "no count");
  std::string deep = "f";
  for (size_t i = 0; i < kFoldedMaxDepth; ++i) deep += ";f";
  expect_bad(deep + " 1\n", "deeper than 4096 frames");
  expect_bad(std::string(kFoldedMaxLine + 1, 'a') + " 1\n", "in.folded:1: line of");
  expect_bad("a 4611686018427387904\nb 1\n", "in.folded:2: counts add up past");
}

TEST(FlameSvg, FramesAreInclusiveAndCarryTheirPlace) {
  FoldedStacks s;
  s.add("main;f", 6);
  s.add("main", 14);
  s.add("other", 3);
  FlameOptions o;
  o.title = "t <&>";
  const std::string svg = flame_svg(s, o);
  EXPECT_NE(svg.find("<title>main (20 instructions, 86.96%)</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("<title>f (6 instructions, 26.09%)</title>"), std::string::npos);
  EXPECT_NE(svg.find("fg-total=\"23\""), std::string::npos);
  EXPECT_NE(svg.find("t &lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("<script type=\"text/ecmascript\"><![CDATA["), std::string::npos);
  EXPECT_EQ(svg.find("http://www.w3.org/2000/svg\" fg"), svg.find("http://www.w3.org/2000/svg\""));
  EXPECT_EQ(svg.find("xlink:href"), std::string::npos);  // nothing external
  EXPECT_EQ(svg.find("<script src"), std::string::npos);
}

TEST(FlameSvg, DifferenceIsColouredByChangeOfMeans) {
  FoldedStacks before, after;
  before.add("a;grows", 200);   // 2 runs: mean 100
  before.add("a;shrinks", 400); // mean 200
  before.add("a;gone", 50);
  after.add("a;grows", 300);    // 1 run: mean 300
  after.add("a;shrinks", 100);
  after.add("a;new", 10);
  const std::string svg = diff_flame_svg(before, 2, after, 1, FlameOptions{});
  EXPECT_NE(svg.find("<title>grows (300 instructions, 73.17%; before 100, +200.00%)</title>"), std::string::npos)
      << svg;
  EXPECT_NE(svg.find("<title>shrinks (100 instructions, 24.39%; before 200, -50.00%)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>new (10 instructions, 2.44%; new)</title>"), std::string::npos);
  EXPECT_EQ(svg.find("<title>gone"), std::string::npos);  // drawn by the new profile
  EXPECT_NE(svg.find("25 instructions before in stacks not run after"), std::string::npos);
  EXPECT_NE(svg.find("fill=\"rgb(255,35,35)\""), std::string::npos);  // grew by >= 100%: full red
}

}  // namespace
}  // namespace kt
