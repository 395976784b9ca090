// kthost diff A B: compare two traces for CI. A and B are bundle directories
// or `kthost report --json` files.
//
// Exit status: 0 no differences beyond the threshold, 1 differences (new or
// no-longer-executed functions, or instruction counts changed by more than
// --threshold percent), 2 error (bad command line, unreadable input).
#include <sys/stat.h>

#include <cstdio>

#include "command.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/decode/analysis.h"
#include "kthost/decode/report.h"

namespace kt::cli {
namespace {

const char* kName = "diff";

Result<ProfileSummary> load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return io_error("stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) {
    KT_ASSIGN_OR_RETURN(auto text, read_file(path, 256u << 20));
    return parse_report_json(text, path);
  }
  KT_ASSIGN_OR_RETURN(auto a, open_analysis(path));
  KT_ASSIGN_OR_RETURN(auto profile, decode_profile(a.bundle.pt, *a.image, a.symbols, DecodeOptions{}));
  return summarize(profile, a.symbols);
}

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.positional("A", "the baseline: bundle directory or report JSON");
  opt.positional("B", "the new trace: bundle directory or report JSON");
  opt.flag("json", "print the difference as JSON");
  opt.value("threshold", "PCT", "instruction-count change that counts as a difference (default 10)");
  opt.value("min-insns", "N", "ignore functions with fewer instructions than this in both (default 0)");
  if (auto exit_status = parse_command_line(opt, kName, args)) return *exit_status;
  DiffOptions d;
  if (auto t = opt.get("threshold")) {
    char* end = nullptr;
    d.threshold_pct = std::strtod(t->c_str(), &end);
    if (end == t->c_str() || *end || d.threshold_pct < 0) {
      std::fprintf(stderr, "kthost diff: --threshold wants a percentage, not \"%s\"\n", t->c_str());
      return 2;
    }
  }
  if (auto m = opt.get("min-insns")) {
    auto v = parse_u64(*m);
    if (!v) {
      std::fprintf(stderr, "kthost diff: --min-insns wants a number\n");
      return 2;
    }
    d.min_insns = *v;
  }
  auto a = load(opt.positionals().at(0));
  if (!a) {
    std::fprintf(stderr, "kthost diff: %s\n", a.error().message.c_str());
    return 2;
  }
  auto b = load(opt.positionals().at(1));
  if (!b) {
    std::fprintf(stderr, "kthost diff: %s\n", b.error().message.c_str());
    return 2;
  }
  DiffResult r = diff_summaries(*a, *b, d);
  std::fputs((opt.has("json") ? format_diff_json(r, d) : format_diff_text(r, d)).c_str(), stdout);
  return r.differs() ? 1 : 0;
}

CommandRegistration reg({kName, "compare two traces (bundles or report JSON); exit 1 on differences, 2 on error", run});

}  // namespace
}  // namespace kt::cli
