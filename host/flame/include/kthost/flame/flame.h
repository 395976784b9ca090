// Flame graphs: folded stacks (Brendan Gregg's "frame;frame;frame COUNT"
// lines, the one definition of that format in kthost), and the interactive
// SVG drawn from them: one profile, or the difference between two.
//
// Folded files are read back from disk, so they are untrusted: parse_folded
// bounds every line, every stack's depth and every count, and says which line
// is wrong. The SVG is self-contained (its script and style are inline, the
// font is the viewer's monospace): click a frame to zoom, "Reset Zoom" to go
// back, "Search" (or Ctrl-F) to highlight frames by regular expression with
// the matched share shown. For tests and links, the URL query "?s=REGEX"
// searches and "?z=ID" clicks frame ID (as a user's click) once loaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kthost/common/result.h"

namespace kt {

struct FoldedStacks {
  std::map<std::string, uint64_t> stacks;  // "root;caller;callee" -> count
  uint64_t total() const;
  void add(const std::string& stack, uint64_t count);  // saturates at kFoldedMaxTotal
};

constexpr size_t kFoldedMaxLine = 1u << 20;     // bytes in one line
constexpr size_t kFoldedMaxDepth = 4096;        // frames in one stack
constexpr uint64_t kFoldedMaxTotal = 1ull << 62;  // sum of all counts

// "a;b;c 123\n" lines, sorted by stack.
std::string format_folded(const FoldedStacks& stacks);
// Errors: InvalidInput naming `name`, the line number and what is wrong (no
// count, a count that is not a decimal number or too large, an empty frame,
// a line or stack over the limits above, a total past kFoldedMaxTotal).
Result<FoldedStacks> parse_folded(std::string_view text, const std::string& name);

struct FlameOptions {
  std::string title = "Flame Graph";
  std::string subtitle;             // a second line under the title (e.g. what was traced)
  std::string unit = "instructions";
  double width = 1200;
  double min_frame_px = 0.1;        // frames narrower than this at full width are left out
};

// One profile: frame widths are inclusive counts; warm colours, stable per name.
std::string flame_svg(const FoldedStacks& stacks, const FlameOptions& options);

// A differential flame graph (as Gregg's difffolded): frames are laid out by
// `after`, each coloured by how its inclusive count changed from `before`
// (red grew, blue shrank, the deeper the larger the change relative to
// before). `before_runs` and `after_runs` divide each side's counts, so sums
// over several runs compare as means. Stacks found only in `before` are not
// drawn; their total is named under the title.
std::string diff_flame_svg(const FoldedStacks& before, uint32_t before_runs, const FoldedStacks& after,
                           uint32_t after_runs, const FlameOptions& options);

}  // namespace kt
