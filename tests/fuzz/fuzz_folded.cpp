// Folded stacks and report JSON read back from disk (kthost flamegraph,
// kthost diff): both parsers, then everything drawn or compared from what
// they accept. The first byte picks the parser.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kthost/flame/flame.h"
#include "kthost/regress/regress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    auto s = kt::parse_folded(text, "fuzz.folded");
    if (!s) return 0;
    // What it accepted writes back to the same stacks.
    auto again = kt::parse_folded(kt::format_folded(*s), "again");
    if (!again || again->stacks != s->stacks) std::abort();
    kt::FlameOptions o;
    (void)kt::flame_svg(*s, o);
    (void)kt::diff_flame_svg(*s, 2, kt::normalize_stacks(*s), 1, o);
    kt::TracedRun r;
    r.stacks = *s;
    (void)kt::compare_run_sets({r}, {r}, {}, {});
  } else {
    std::map<std::string, uint64_t> losses;
    auto summary = kt::parse_report_json(text, "fuzz.json", &losses);
    if (!summary) return 0;
    kt::TracedRun r;
    r.summary = *summary;
    r.losses = losses;
    kt::RegressionResult res = kt::compare_run_sets({r}, {r, r}, {}, {});
    (void)kt::regression_json(res);
    (void)kt::regression_markdown(res, "a", "b");
    (void)kt::regression_junit(res, {"x"});
  }
  return 0;
}
