// kthost diff BASE NEW: did the kernel regress? BASE and NEW are each one run
// or several, comma-separated: bundle directories (decoded here) or `kthost
// report --json` files (with their call stacks when X.folded sits beside
// X.json). Several runs per side give the noise model its spread (kt_regress).
//
// Exit status: 0 no regression, 1 regression (a function's own instructions
// grew beyond the noise, or one is newly executed), 2 error (bad command
// line, unreadable input, or a run over the decode-error or loss limits).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

#include "command.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/decode/analysis.h"
#include "kthost/flame/flame.h"
#include "kthost/regress/regress.h"

namespace kt::cli {
namespace {

const char* kName = "diff";

Result<TracedRun> load_run(const std::string& path) {
  TracedRun run;
  run.name = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return io_error("stat " + path, errno);
  if (!S_ISDIR(st.st_mode)) {
    KT_ASSIGN_OR_RETURN(auto text, read_file(path, 256u << 20));
    KT_ASSIGN_OR_RETURN(run.summary, parse_report_json(text, path, &run.losses));
    const std::string stem = path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0
                                 ? path.substr(0, path.size() - 5)
                                 : path;
    if (::stat((stem + ".folded").c_str(), &st) == 0) {
      KT_ASSIGN_OR_RETURN(auto folded, read_file(stem + ".folded", 256u << 20));
      KT_ASSIGN_OR_RETURN(run.stacks, parse_folded(folded, stem + ".folded"));
    }
    return run;
  }
  KT_ASSIGN_OR_RETURN(auto a, open_analysis(path));
  KT_ASSIGN_OR_RETURN(auto profile, decode_profile(a.bundle.pt, *a.image, a.symbols, a.decode_options()));
  run.summary = summarize(profile, a.symbols);
  run.stacks = folded_stacks_of(profile, a.symbols);
  for (const auto& [k, n] : a.bundle.losses)
    if (n) run.losses[k] = n;
  if (profile.skipped_bytes) run.losses["pt_bytes_not_decoded"] = profile.skipped_bytes;  // as parse_report_json reads it
  return run;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Result<std::vector<TracedRun>> load_side(const std::string& list, const char* side, bool quiet) {
  std::vector<TracedRun> runs;
  const auto paths = split_list(list);
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!quiet) std::fprintf(stderr, "kthost diff: %s run %zu/%zu: %s\n", side, i + 1, paths.size(), paths[i].c_str());
    auto r = load_run(paths[i]);
    if (!r) return r.error().with_context(std::string(side) + " run " + paths[i]);
    runs.push_back(std::move(*r));
  }
  if (runs.empty()) return Error(ErrorCode::InvalidArgument, std::string("no ") + side + " runs given");
  return runs;
}

bool parse_number(const Options& opt, const char* name, double& into) {
  auto v = opt.get(name);
  if (!v) return true;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end || !(d >= 0)) {
    std::fprintf(stderr, "kthost diff: --%s wants a non-negative number, not \"%s\"\n", name, v->c_str());
    return false;
  }
  into = d;
  return true;
}

Status write_outputs(const std::string& dir, const RegressionResult& r, const std::string& base_label,
                     const std::string& new_label, const std::vector<std::string>& watch, size_t top) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return io_error("mkdir " + dir, errno);
  KT_TRY(write_file_atomic(dir + "/regression.json", regression_json(r)));
  KT_TRY(write_file_atomic(dir + "/summary.md", regression_markdown(r, base_label, new_label, top)));
  KT_TRY(write_file_atomic(dir + "/junit.xml", regression_junit(r, watch)));
  if (!r.base.have_stacks || !r.next.have_stacks) return {};
  FlameOptions o;
  o.title = "base: " + base_label;
  o.subtitle = std::to_string(r.base.runs) + " runs summed";
  KT_TRY(write_file_atomic(dir + "/base.svg", flame_svg(r.base.stacks, o)));
  KT_TRY(write_file_atomic(dir + "/base.folded", format_folded(r.base.stacks)));
  o.title = "new: " + new_label;
  o.subtitle = std::to_string(r.next.runs) + " runs summed";
  KT_TRY(write_file_atomic(dir + "/new.svg", flame_svg(r.next.stacks, o)));
  KT_TRY(write_file_atomic(dir + "/new.folded", format_folded(r.next.stacks)));
  o.title = "change: " + base_label + " -> " + new_label;
  o.subtitle = "mean per run, laid out by new";
  KT_TRY(write_file_atomic(dir + "/diff.svg", diff_flame_svg(r.base.stacks, r.base.runs, r.next.stacks, r.next.runs, o)));
  return {};
}

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.positional("BASE", "the baseline: bundle directories or report JSON files, comma-separated");
  opt.positional("NEW", "the new kernel's runs, the same way");
  opt.flag("json", "print the result as JSON (regression.json's format)");
  opt.flag("quiet", "no progress on stderr");
  opt.value("out", "DIR", "write regression.json, summary.md, junit.xml and flame graphs (base, new, diff) here");
  opt.value("threshold", "PCT", "a change must exceed this share of the base mean (default 10)");
  opt.value("spread-factor", "K", "... and K times the larger max-min spread of the two sides (default 2)");
  opt.value("min-share-ppm", "N", "... and N per million of all base instructions (default 1000: 0.1%)");
  opt.value("min-insns", "N", "... and N instructions (default 1000)");
  opt.value("max-errors-ppm", "N", "a run with more decode errors per million instructions is an error (default 1)");
  opt.value("max-losses", "N", "a run that lost more than N records, holds or streams is an error (default 0)");
  opt.value("watch", "FUNCS", "comma-separated functions that get a JUnit test case even when unchanged");
  opt.value("base-label", "TEXT", "the base's name in the outputs (default \"base\")");
  opt.value("new-label", "TEXT", "the new side's name in the outputs (default \"new\")");
  opt.value("top", "N", "rows per Markdown table (default 20)");
  if (auto exit_status = parse_command_line(opt, kName, args)) return *exit_status;
  NoiseModel model;
  RegressionLimits limits;
  double min_insns = static_cast<double>(model.min_insns), max_losses = 0, top = 20;
  if (!parse_number(opt, "threshold", model.threshold_pct) || !parse_number(opt, "spread-factor", model.spread_factor) ||
      !parse_number(opt, "min-share-ppm", model.min_share_ppm) || !parse_number(opt, "min-insns", min_insns) ||
      !parse_number(opt, "max-errors-ppm", limits.max_errors_per_million) ||
      !parse_number(opt, "max-losses", max_losses) || !parse_number(opt, "top", top))
    return 2;
  model.min_insns = static_cast<uint64_t>(min_insns);
  limits.max_losses = static_cast<uint64_t>(max_losses);
  const bool quiet = opt.has("quiet") || opt.has("json");
  auto base = load_side(opt.positionals().at(0), "base", quiet);
  if (!base) {
    std::fprintf(stderr, "kthost diff: %s\n", base.error().message.c_str());
    return 2;
  }
  auto next = load_side(opt.positionals().at(1), "new", quiet);
  if (!next) {
    std::fprintf(stderr, "kthost diff: %s\n", next.error().message.c_str());
    return 2;
  }
  RegressionResult r = compare_run_sets(*base, *next, model, limits);
  const std::string base_label = opt.get_or("base-label", "base"), new_label = opt.get_or("new-label", "new");
  const auto watch = split_list(opt.get_or("watch", ""));
  if (auto dir = opt.get("out")) {
    if (auto st = write_outputs(*dir, r, base_label, new_label, watch, static_cast<size_t>(top)); !st) {
      std::fprintf(stderr, "kthost diff: %s\n", st.error().message.c_str());
      return 2;
    }
  }
  std::fputs((opt.has("json") ? regression_json(r) : regression_markdown(r, base_label, new_label,
                                                                            static_cast<size_t>(top)))
                 .c_str(),
             stdout);
  return r.exit_status();
}

CommandRegistration reg({kName, "did the kernel regress? compare runs (bundles or report JSON) with a noise model; "
                                "exit 1 on a regression, 2 on error",
                         run});

}  // namespace
}  // namespace kt::cli
