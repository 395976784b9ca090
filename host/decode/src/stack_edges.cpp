// check_stack_edges: every caller -> callee step of the profile's stacks
// against the caller's own machine code (see decoder.h). Shares nothing with
// the walk that built the stacks but the instruction length decoder.
#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include "kthost/decode/decoder.h"
#include "piece_walk.h"

namespace kt {

namespace {

// What a function's text (every version of it) can do.
struct CallSites {
  std::set<uint64_t> calls;  // direct call targets
  std::set<uint64_t> jumps;  // direct jump targets (tail calls)
  bool indirect_call = false, indirect_jump = false;
  bool falls_through = false;  // its last instruction can run on into the next symbol
  bool has_text = false;
  // Its ftrace site is on in some version: its first instruction (after an
  // ENDBR64) a CALL, where it is a 5-byte NOP while ftrace leaves it alone.
  // An ftrace_ops with IPMODIFY (livepatch, ktguard's hooks) then runs another
  // function in its place, on its frame.
  bool ftrace_site_on = false;
};

int32_t rel32(const uint8_t* p) { return static_cast<int32_t>(p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24); }

void scan(const uint8_t* text, uint64_t start, uint64_t size, CallSites& out) {
  uint64_t at = 0;
  bool ends = false;  // the last instruction seen never runs on to the next
  while (at < size) {
    const size_t len = x86_insn_length(text + at, static_cast<size_t>(std::min<uint64_t>(15, size - at)));
    if (len == 0) {
      ++at;  // data or padding: resynchronise a byte on
      continue;
    }
    const uint8_t* p = text + at;
    const uint64_t next = start + at + len;
    size_t i = 0;
    while (i < len && (p[i] == 0x66 || p[i] == 0x67 || p[i] == 0x2e || p[i] == 0x3e || p[i] == 0xf2 || p[i] == 0xf3)) ++i;
    if (i < len && (p[i] & 0xf0) == 0x40) ++i;  // REX
    const uint8_t op = i < len ? p[i] : 0;
    ends = op == 0xc3 || op == 0xc2 || op == 0xe9 || op == 0xeb || op == 0xcc ||
           (op == 0x0f && i + 1 < len && p[i + 1] == 0x0b) ||                       // ud2
           (op == 0xff && i + 1 < len && (((p[i + 1] >> 3) & 7) == 4 || ((p[i + 1] >> 3) & 7) == 5));
    if (op == 0xe8 && i + 5 == len) out.calls.insert(next + static_cast<uint64_t>(static_cast<int64_t>(rel32(p + i + 1))));
    else if (op == 0xe9 && i + 5 == len) out.jumps.insert(next + static_cast<uint64_t>(static_cast<int64_t>(rel32(p + i + 1))));
    else if (op == 0xeb && i + 2 == len) out.jumps.insert(next + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(p[i + 1]))));
    else if (op == 0x0f && i + 6 == len && (p[i + 1] & 0xf0) == 0x80)
      out.jumps.insert(next + static_cast<uint64_t>(static_cast<int64_t>(rel32(p + i + 2))));
    else if (op >= 0x70 && op <= 0x7f && i + 2 == len)
      out.jumps.insert(next + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(p[i + 1]))));
    else if (op == 0xff && i + 1 < len) {
      const unsigned reg = (p[i + 1] >> 3) & 7;
      if (reg == 2 || reg == 3) out.indirect_call = true;
      if (reg == 4 || reg == 5) out.indirect_jump = true;
    }
    at += len;
  }
  if (size > 0 && !ends) out.falls_through = true;
}

// The kernel's entry text (.entry.text, between the symbols kallsyms names
// __entry_text_start and __entry_text_end): the code that runs on an event,
// its entry points and its ways out (error_return,
// restore_regs_and_return_to_kernel, the IRET). {0, 0} when not known.
std::pair<uint64_t, uint64_t> entry_text(const Symbolizer& symbols) {
  uint64_t from = 0, to = 0;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const FunctionInfo& f = symbols.function(static_cast<uint32_t>(i));
    if (f.name == "__entry_text_start") from = f.start;
    else if (f.name == "__entry_text_end") to = f.start;
  }
  return from && to > from ? std::make_pair(from, to) : std::make_pair(uint64_t{0}, uint64_t{0});
}

// Whether the ftrace site at a function's start is a CALL (CallSites).
bool ftrace_call_at(const uint8_t* p) {
  const size_t at = (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa) ? 4 : 0;  // ENDBR64
  return p[at] == 0xe8;
}

}  // namespace

StackEdgeCheck check_stack_edges(const Profile& profile, const VersionedImage& image, const Symbolizer& symbols) {
  StackEdgeCheck out;
  // The distinct steps, with the instructions of the stacks they are in.
  std::unordered_map<uint64_t, uint64_t> steps;
  for (const auto& [path, n] : profile.stacks)
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      const uint32_t a = path[i], b = path[i + 1];
      if (a == symbols.base_unknown() || a >= symbols.size() || b >= symbols.size()) continue;
      steps[(uint64_t{a} << 32) | b] += n;
    }
  std::unordered_map<uint32_t, CallSites> sites;
  auto sites_of = [&](uint32_t fn) -> const CallSites& {
    auto [it, fresh] = sites.try_emplace(fn);
    if (fresh) {
      const FunctionInfo& f = symbols.function(fn);
      for (const TextVersion& v : image.versions()) {
        if (f.end <= v.start || f.start >= v.start + v.size) continue;
        const uint64_t from = std::max(f.start, v.start), to = std::min(f.end, v.start + v.size);
        scan(image.data(v) + (from - v.start), from, to - from, it->second);
        it->second.has_text = true;
        if (from == f.start && to - from >= 9 && ftrace_call_at(image.data(v) + (from - v.start)))
          it->second.ftrace_site_on = true;
      }
    }
    return it->second;
  };
  const std::pair<uint64_t, uint64_t> entry = entry_text(symbols);
  std::vector<std::pair<uint64_t, uint64_t>> failed;  // (instructions, step)
  for (const auto& [key, n] : steps) {
    const uint32_t a = static_cast<uint32_t>(key >> 32), b = static_cast<uint32_t>(key);
    out.steps++;
    const FunctionInfo& callee = symbols.function(b);
    if (a == Symbolizer::kUnknown || b == Symbolizer::kUnknown) {
      out.unchecked++;
      continue;
    }
    if (is_event_entry(callee.name) || (callee.start >= entry.first && callee.start < entry.second)) {
      out.interrupts++;  // an interrupt or exception (its entry or exit code) on top of what it struck
      continue;
    }
    const CallSites& s = sites_of(a);
    if (!s.has_text) {
      out.unchecked++;
      continue;
    }
    // A direct call into the callee, or into a function whose jumps lead to
    // it (tail calls, static call trampolines, a thunk: up to 4 jumps).
    bool ok = s.indirect_call;
    bool redirected = false;  // a function reached has its ftrace site on
    std::vector<uint32_t> frontier, next;
    std::set<uint32_t> seen;
    for (uint64_t t : s.calls) {
      const uint32_t h = symbols.lookup(t, 0);
      if (h == b) ok = true;
      else if (h != Symbolizer::kUnknown && seen.insert(h).second) frontier.push_back(h);
    }
    for (int depth = 0; !ok && depth < 4 && !frontier.empty(); ++depth) {
      next.clear();
      for (uint32_t h : frontier) {
        const CallSites& hs = sites_of(h);
        redirected = redirected || hs.ftrace_site_on;
        if (hs.indirect_jump || function_kind_of(symbols.function(h).name) == kFnThunk) {
          ok = true;
          break;
        }
        std::vector<uint64_t> onward(hs.jumps.begin(), hs.jumps.end());
        if (hs.falls_through) onward.push_back(symbols.function(h).end);  // into the next symbol
        for (uint64_t t : onward) {
          const uint32_t g = symbols.lookup(t, 0);
          if (g == b && t == callee.start) ok = true;
          else if (g != h && g != Symbolizer::kUnknown && seen.insert(g).second) next.push_back(g);
        }
        if (ok) break;
      }
      frontier.swap(next);
    }
    if (ok) continue;
    if (redirected) {
      out.ftrace_redirects++;
      continue;
    }
    out.failed++;
    out.failed_insns += n;
    failed.emplace_back(n, key);
  }
  // The examples: the failed steps with the most instructions.
  std::sort(failed.begin(), failed.end(), std::greater<>());
  for (size_t i = 0; i < failed.size() && i < 10; ++i)
    out.examples.emplace_back(static_cast<uint32_t>(failed[i].second >> 32), static_cast<uint32_t>(failed[i].second));
  return out;
}

}  // namespace kt
