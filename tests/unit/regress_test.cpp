// kt_regress: name matching across kernels, the noise model, and the CI outputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kthost/regress/regress.h"

namespace kt {
namespace {

TEST(RegressNames, CompilerSuffixesGoModulesStay) {
  EXPECT_EQ(normalize_function_name("foo.constprop.0"), "foo");
  EXPECT_EQ(normalize_function_name("foo.isra.12"), "foo");
  EXPECT_EQ(normalize_function_name("foo.cold"), "foo");
  EXPECT_EQ(normalize_function_name("foo.isra.0.cold"), "foo");
  EXPECT_EQ(normalize_function_name("foo.constprop.0.isra.0"), "foo");
  EXPECT_EQ(normalize_function_name("foo.part.0"), "foo.part.0");  // a different function
  EXPECT_EQ(normalize_function_name("bar.cold [mod]"), "bar [mod]");
  EXPECT_EQ(normalize_function_name("bar_[mod]"), "bar [mod]");  // folded spelling
  EXPECT_EQ(normalize_function_name("bpf_prog_0123456789abcdef_kts_fentry_3"),
            "bpf_prog_0123456789abcdef_kts_fentry_3");
  EXPECT_EQ(normalize_function_name(".isra.0"), ".isra.0");
  EXPECT_EQ(normalize_function_name(".cold"), ".cold");
}

TracedRun run(const std::string& name, std::map<std::string, uint64_t> fns, uint64_t other = 1000000) {
  TracedRun r;
  r.name = name;
  r.summary.insns = other;
  for (const auto& [f, n] : fns) {
    r.summary.functions[f].insns = n;
    r.summary.insns += n;
  }
  return r;
}

TEST(RegressNoise, RunsWithinTheirSpreadAreNotAChange) {
  std::vector<TracedRun> a = {run("a1", {{"f", 100000}, {"g", 5000}}), run("a2", {{"f", 104000}, {"g", 9000}}),
                        run("a3", {{"f", 102000}})};
  std::vector<TracedRun> b = {run("b1", {{"f", 103000}, {"g", 7000}}), run("b2", {{"f", 101000}}),
                        run("b3", {{"f", 105000}, {"g", 4000}})};
  RegressionResult r = compare_run_sets(a, b, {}, {});
  EXPECT_TRUE(r.self.empty());
  EXPECT_EQ(r.exit_status(), 0);
  EXPECT_EQ(r.functions_compared, 2u);
}

TEST(RegressNoise, AGrowthBeyondEveryMarginIsARegressionWithItsFactor) {
  std::vector<TracedRun> a = {run("a1", {{"work", 400120}, {"f.isra.0", 100000}}), run("a2", {{"work", 400120}, {"f.isra.0", 100000}})};
  std::vector<TracedRun> b = {run("b1", {{"work", 4000120}, {"f", 100000}}), run("b2", {{"work", 4000120}, {"f.constprop.1", 100000}})};
  RegressionResult r = compare_run_sets(a, b, {}, {});
  ASSERT_EQ(r.self.size(), 1u);  // f matched across its spellings
  EXPECT_EQ(r.self[0].name, "work");
  EXPECT_EQ(r.self[0].kind, ChangeKind::Grew);
  EXPECT_NEAR(r.self[0].factor(), 4000120.0 / 400120.0, 1e-12);
  EXPECT_TRUE(r.regressed());
  EXPECT_EQ(r.exit_status(), 1);
}

TEST(RegressNoise, EachMarginCanHoldAChangeBack) {
  std::vector<TracedRun> a = {run("a", {{"f", 100000}})}, b = {run("b", {{"f", 109000}})};
  EXPECT_TRUE(compare_run_sets(a, b, {}, {}).self.empty());  // 9% < 10%
  NoiseModel m;
  m.threshold_pct = 5;
  m.min_share_ppm = 0;
  EXPECT_EQ(compare_run_sets(a, b, m, {}).self.size(), 1u);
  m.min_share_ppm = 10000;  // 1% of ~1.1M: 11000 > 9000
  EXPECT_TRUE(compare_run_sets(a, b, m, {}).self.empty());
  m.min_share_ppm = 0;
  m.min_insns = 10000;
  EXPECT_TRUE(compare_run_sets(a, b, m, {}).self.empty());
  // The spread: base runs 95000..105000 give a margin of 2 x 10000.
  std::vector<TracedRun> a2 = {run("a1", {{"f", 95000}}), run("a2", {{"f", 105000}})};
  std::vector<TracedRun> b2 = {run("b1", {{"f", 118000}}), run("b2", {{"f", 118000}})};
  m.min_insns = 0;
  EXPECT_TRUE(compare_run_sets(a2, b2, m, {}).self.empty());  // +18000 < 20000
}

TEST(RegressNoise, TheUnflaggedChangesNearestTheirMarginAreListedWithTheShareOfItUsed) {
  // f: +9000 of a 10000 margin (10% of 100000); g: -3000 of 10000 (the
  // per-million margin: 1000 ppm of 10M, with the 1M
  // instructions in no function); h unchanged; work flagged.
  std::vector<TracedRun> a = {run("a", {{"f", 100000}, {"g", 50000}, {"h", 7000}, {"work", 8843000}})};
  std::vector<TracedRun> b = {run("b", {{"f", 109000}, {"g", 47000}, {"h", 7000}, {"work", 18843000}})};
  RegressionResult r = compare_run_sets(a, b, {}, {});
  ASSERT_EQ(r.self.size(), 1u);
  EXPECT_EQ(r.self[0].name, "work");
  ASSERT_EQ(r.nearest.size(), 2u);  // h did not move
  EXPECT_EQ(r.nearest[0].name, "f");
  EXPECT_EQ(r.nearest[0].kind, ChangeKind::Grew);
  EXPECT_NEAR(r.nearest[0].margin_used(), 0.9, 1e-9);
  EXPECT_EQ(r.nearest[1].name, "g");
  EXPECT_EQ(r.nearest[1].kind, ChangeKind::Shrank);
  EXPECT_NEAR(r.nearest[1].margin_used(), 0.3, 1e-9);
  const std::string md = regression_markdown(r, "A", "B");
  EXPECT_NE(md.find("Closest to its margin without being flagged: `f` grew 100,000 → 109,000 (90% of its margin"),
            std::string::npos) << md;
  EXPECT_NE(regression_json(r).find("\"nearest\""), std::string::npos);
}

TEST(RegressNoise, NewAndVanishedOnlyWhenConsistent) {
  std::vector<TracedRun> a = {run("a1", {{"old", 50000}, {"flaky", 50000}}), run("a2", {{"old", 50000}})};
  std::vector<TracedRun> b = {run("b1", {{"new", 50000}}), run("b2", {{"new", 50000}, {"flaky", 100000}})};
  NoiseModel m;
  m.spread_factor = 0;
  RegressionResult r = compare_run_sets(a, b, m, {});
  std::map<std::string, ChangeKind> kinds;
  for (const auto& d : r.self) kinds[d.name] = d.kind;
  EXPECT_EQ(kinds.at("new"), ChangeKind::New);
  EXPECT_EQ(kinds.at("old"), ChangeKind::Vanished);
  EXPECT_EQ(kinds.at("flaky"), ChangeKind::Grew);  // in some runs of each side: a change, not new
}

TEST(RegressLimits, ARunOverTheLimitsIsAnErrorNotAVerdict) {
  std::vector<TracedRun> a = {run("a", {{"f", 1000}})}, b = {run("b", {{"f", 1000}})};
  b[0].summary.errors["desync"] = 5;  // 5 in ~1M: over 1 per million
  a[0].losses["guard_miss"] = 1;
  RegressionResult r = compare_run_sets(a, b, {}, {});
  EXPECT_EQ(r.exit_status(), 2);
  ASSERT_EQ(r.run_problems.size(), 2u);
  EXPECT_NE(r.run_problems[0].find("base run a: 1 lost"), std::string::npos) << r.run_problems[0];
  EXPECT_NE(r.run_problems[1].find("new run b: 5 decode errors"), std::string::npos) << r.run_problems[1];
  RegressionLimits lax;
  lax.max_errors_per_million = 10;
  lax.max_losses = 1;
  EXPECT_EQ(compare_run_sets(a, b, {}, lax).exit_status(), 0);
}

TEST(RegressStacks, InclusiveCountsEachFunctionOncePerStack) {
  TracedRun a = run("a", {{"leaf", 100000}}), b = run("b", {{"leaf", 1000000}});
  a.stacks.add("top;mid.isra.0;leaf", 100000);
  a.stacks.add("top;top;other", 5000);  // recursion: top counted once
  b.stacks.add("top;mid.constprop.2;leaf", 1000000);
  b.stacks.add("top;top;other", 5000);
  RegressionResult r = compare_run_sets({a}, {b}, {}, {});
  std::vector<std::string> names;
  for (const auto& d : r.inclusive) names.push_back(d.name);
  EXPECT_EQ(names, (std::vector<std::string>{"leaf", "mid", "top"}));
  EXPECT_EQ(r.base.inclusive.at("top").mean, 105000);
  EXPECT_EQ(r.base.stacks.stacks.count("top;mid;leaf"), 1u);
}

TEST(RegressOutputs, JunitCountsAddUpAndMarkdownHasItsSections) {
  std::vector<TracedRun> a = {run("a", {{"grows", 100000}, {"shrinks", 100000}})};
  std::vector<TracedRun> b = {run("b", {{"grows", 300000}, {"shrinks", 10000}, {"fresh", 90000}})};
  RegressionResult r = compare_run_sets(a, b, {}, {});
  const std::string x = regression_junit(r, {"steady", "grows"});
  EXPECT_NE(x.find("<testsuites name=\"kthost regression\" tests=\"5\" failures=\"2\" errors=\"0\">"),
            std::string::npos) << x;
  EXPECT_NE(x.find("<testsuite name=\"functions\" tests=\"4\" failures=\"2\""), std::string::npos) << x;
  EXPECT_NE(x.find("name=\"steady (own instructions)\""), std::string::npos);
  const std::string md = regression_markdown(r, "v6.1 | base", "new", 10);
  for (const char* s : {"**Verdict: regression**", "## Regressions", "## Improvements", "## Inclusive changes",
                        "## Coverage", "## Runs: decode errors and losses", "`grows`", "`fresh`", "| new |",
                        "| base `a` | 1,200,000 | 0 | 0 |", "| new `b` | 1,400,000 | 0 | 0 |"})
    EXPECT_NE(md.find(s), std::string::npos) << s << "\n" << md;
  auto j = nlohmann::json::parse(regression_json(r));
  EXPECT_EQ(j["verdict"], "regression");
  EXPECT_EQ(j["exit_status"], 1);
  EXPECT_EQ(j["self"].size(), 3u);
}

}  // namespace
}  // namespace kt
