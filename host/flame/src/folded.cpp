// Folded stacks: writing them, and reading them back with every bound checked.
#include <cstdio>

#include "kthost/flame/flame.h"

namespace kt {

uint64_t FoldedStacks::total() const {
  uint64_t t = 0;
  for (const auto& [stack, n] : stacks) t = (t + n > kFoldedMaxTotal || t + n < t) ? kFoldedMaxTotal : t + n;
  return t;
}

void FoldedStacks::add(const std::string& stack, uint64_t count) {
  uint64_t& n = stacks[stack];
  n = (count > kFoldedMaxTotal - n) ? kFoldedMaxTotal : n + count;
}

std::string format_folded(const FoldedStacks& s) {
  std::string out;
  for (const auto& [stack, n] : s.stacks) {
    out += stack;
    out += ' ';
    out += std::to_string(n);
    out += '\n';
  }
  return out;
}

Result<FoldedStacks> parse_folded(std::string_view text, const std::string& name) {
  FoldedStacks out;
  uint64_t total = 0;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    auto bad = [&](const std::string& what) {
      return Error(ErrorCode::InvalidInput, name + ":" + std::to_string(line_no) + ": " + what);
    };
    if (line.size() > kFoldedMaxLine)
      return bad("line of " + std::to_string(line.size()) + " bytes (at most " + std::to_string(kFoldedMaxLine) + ")");
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos || space == 0) return bad("no count after the stack (want \"a;b;c COUNT\")");
    std::string_view stack = line.substr(0, space), count = line.substr(space + 1);
    if (count.empty() || count.size() > 19) return bad("count \"" + std::string(count.substr(0, 32)) + "\" is not a number");
    uint64_t n = 0;
    for (char c : count) {
      if (c < '0' || c > '9') return bad("count \"" + std::string(count.substr(0, 32)) + "\" is not a number");
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    size_t depth = 1, frame_start = 0;
    for (size_t i = 0; i <= stack.size(); ++i) {
      if (i < stack.size() && stack[i] != ';') continue;
      if (i == frame_start) return bad("empty frame name in the stack");
      if (i < stack.size() && ++depth > kFoldedMaxDepth)
        return bad("stack deeper than " + std::to_string(kFoldedMaxDepth) + " frames");
      frame_start = i + 1;
    }
    if (n > kFoldedMaxTotal - total) return bad("counts add up past " + std::to_string(kFoldedMaxTotal));
    total += n;
    out.stacks[std::string(stack)] += n;
  }
  return out;
}

}  // namespace kt
