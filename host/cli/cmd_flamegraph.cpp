// kthost flamegraph FOLDED -o SVG [--base BEFORE]: the interactive flame graph
// of a folded-stacks file (kthost report --folded, kthost diff --out, or any
// tool that writes Brendan Gregg's format); with --base, the differential
// graph of FOLDED against BEFORE. The files are untrusted: parse_folded
// checks every line and names the first bad one.
#include "command.h"
#include "kthost/common/io.h"
#include "kthost/flame/flame.h"

namespace kt::cli {
namespace {

const char* kName = "flamegraph";
constexpr size_t kMaxFolded = 1u << 30;

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.positional("FOLDED", "folded stacks (\"a;b;c COUNT\" lines)");
  opt.value("output", "SVG", "the SVG to write (-o)");
  opt.value("base", "FOLDED", "draw the change from this profile to FOLDED (red grew, blue shrank)");
  opt.value("title", "TEXT", "the title (default: the file name)");
  opt.value("unit", "WORD", "what the counts are (default instructions)");
  std::vector<std::string> a = args;
  for (auto& s : a)
    if (s == "-o") s = "--output";
  if (auto exit_status = parse_command_line(opt, kName, a)) return *exit_status;
  auto out = opt.get("output");
  if (!out) return fail(kName, Error(ErrorCode::InvalidArgument, "-o SVG is required"));
  const std::string in = opt.positionals().at(0);
  auto text = read_file(in, kMaxFolded);
  if (!text) return fail(kName, text.error());
  auto stacks = parse_folded(*text, in);
  if (!stacks) return fail(kName, stacks.error());
  FlameOptions o;
  o.title = opt.get_or("title", in);
  o.unit = opt.get_or("unit", "instructions");
  std::string svg;
  if (auto base = opt.get("base")) {
    auto btext = read_file(*base, kMaxFolded);
    if (!btext) return fail(kName, btext.error());
    auto before = parse_folded(*btext, *base);
    if (!before) return fail(kName, before.error());
    o.subtitle = "change from " + *base;
    svg = diff_flame_svg(*before, 1, *stacks, 1, o);
  } else {
    svg = flame_svg(*stacks, o);
  }
  if (auto st = write_file_atomic(*out, svg); !st) return fail(kName, st.error());
  return 0;
}

CommandRegistration reg({kName, "draw an interactive flame graph SVG from folded stacks (or the change between two)",
                         run});

}  // namespace
}  // namespace kt::cli
