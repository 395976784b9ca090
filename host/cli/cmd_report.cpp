// kthost report BUNDLE: decode a trace bundle and report per-function
// instructions and calls, the call graph, folded stacks and a flame graph,
// coverage (or coverage alone, by the fast path), or the instruction trace of
// a time window.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "command.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/decode/analysis.h"
#include "kthost/decode/coverage.h"
#include "kthost/decode/report.h"

namespace kt::cli {
namespace {

const char* kName = "report";

std::optional<uint64_t> number(const Options& opt, const std::string& name, Error* err) {
  auto v = opt.get(name);
  if (!v) return std::nullopt;
  auto n = parse_u64(*v);
  if (!n) *err = Error(ErrorCode::InvalidArgument, "--" + name + " wants a number, not \"" + *v + "\"");
  return n;
}

// --coverage-only: decode_coverage, printed as the report's coverage part.
int coverage_only(const Options& opt, const Analysis& analysis, const DecodeOptions& dopt, bool progress) {
  auto cov = decode_coverage(analysis.bundle.pt, *analysis.image, analysis.symbols, dopt);
  if (progress) std::fprintf(stderr, "\n");
  if (!cov) return fail(kName, cov.error());
  Profile p;  // what the coverage tables read
  p.insns = cov->insns;
  p.blocks_seen = cov->blocks_seen;
  for (const auto& [fn, n] : cov->function_insns) p.functions[fn].insns = n;
  ReportOptions ropt;
  ropt.coverage = true;
  ropt.coverage_module = opt.get_or("module", "");
  uint64_t errors = 0;
  for (const auto& [kind, n] : cov->error_counts) errors += n;
  if (opt.has("json")) {
    nlohmann::json j{{"format", "kthost-coverage"},
                     {"version", 1},
                     {"insns", cov->insns},
                     {"blocks_covered", cov->blocks_seen.size()},
                     {"functions_covered", cov->function_insns.size()},
                     {"decode_errors", errors},
                     {"pt_bytes_not_decoded", cov->skipped_bytes},
                     {"loop_insns_dropped", cov->loop_insns_dropped},
                     {"pieces", cov->pieces},
                     {"fast_pieces", cov->fast_pieces},
                     {"full_decoder_bytes", cov->fallback_bytes},
                     {"full_decoder_reasons", cov->fallback_reasons},
                     {"seconds", cov->seconds},
                     {"coverage", nlohmann::json::parse(coverage_json(p, analysis.symbols, ropt))}};
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
    return 0;
  }
  std::printf("%" PRIu64 " instructions, %zu blocks and %zu functions executed; %.2f s on %u threads\n", cov->insns,
              cov->blocks_seen.size(), cov->function_insns.size(), cov->seconds, cov->threads);
  std::printf("fast path: %" PRIu64 " of %" PRIu64 " pieces walked; %" PRIu64
              " pieces (%s of PT) decoded in full, %" PRIu64 " decode errors there\n",
              cov->fast_pieces, cov->pieces, cov->pieces - cov->fast_pieces, human_bytes(cov->fallback_bytes).c_str(),
              errors);
  for (const auto& [why, n] : cov->fallback_reasons) std::printf("  %6" PRIu64 "  %s\n", n, why.c_str());
  if (cov->skipped_bytes > 0 || cov->loop_insns_dropped > 0)
    std::printf("not counted: %s of PT after decode errors, %" PRIu64 " instructions of a loop no packet confirmed\n",
                human_bytes(cov->skipped_bytes).c_str(), cov->loop_insns_dropped);
  std::fputs(coverage_section(p, analysis.symbols, ropt).c_str(), stdout);
  return 0;
}

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.positional("BUNDLE", "trace bundle directory (docs/BUNDLE.md)");
  opt.flag("json", "print the report as JSON");
  opt.value("cpu", "N", "per-function table for one CPU (and --itrace: only this CPU)");
  opt.value("top", "N", "functions in the table (default 25)");
  opt.flag("callgraph", "add the call graph (caller -> callee counts)");
  opt.value("folded", "FILE", "write folded stacks (flamegraph.pl input)");
  opt.value("flamegraph", "FILE.svg", "write a flame graph SVG");
  opt.flag("coverage", "add coverage: functions and blocks executed, by module");
  opt.value("module", "M", "with --coverage: list the executed functions of module M");
  opt.flag("coverage-only", "coverage alone, by the fast path (no call stacks; the same answer, several times faster)");
  opt.flag("itrace", "print the instruction trace of a time window (with --from/--to, PT time)");
  opt.value("from", "T", "start of the --itrace window (PT time, default 0)");
  opt.value("to", "T", "end of the --itrace window (PT time, default: the end)");
  opt.value("vmlinux", "FILE", "vmlinux with debuginfo: source file:line for functions");
  opt.value("threads", "N", "decoder threads (default: every core)");
  opt.value("align-window", "T", "try text versions moved by T PT time units where a piece has errors (0: never; default: the piece's own span)");
  opt.flag("quiet", "no progress on stderr");
  opt.flag("no-pt-check", "do not reject PT streams with bad packets (hardware AUX loss); the decoder counts them");
  if (auto exit_status = parse_command_line(opt, kName, args)) return *exit_status;
  Error err(ErrorCode::InvalidArgument, "");
  auto cpu = number(opt, "cpu", &err);
  auto top = number(opt, "top", &err);
  auto from = number(opt, "from", &err);
  auto to = number(opt, "to", &err);
  auto threads = number(opt, "threads", &err);
  auto window = number(opt, "align-window", &err);
  if (!err.message.empty()) return fail(kName, err);

  BundleReadOptions read_options = analysis_read_options();
  if (opt.has("no-pt-check")) read_options.check_pt = nullptr;
  auto analysis = open_analysis(opt.positionals().at(0), opt.get_or("vmlinux", ""), read_options);
  if (!analysis) return fail(kName, analysis.error());
  const auto& pt = analysis->bundle.pt;
  std::optional<uint32_t> cpu32;
  if (cpu) cpu32 = static_cast<uint32_t>(*cpu);

  if (opt.has("itrace")) {
    auto lines = decode_trace(pt, *analysis->image, analysis->symbols, cpu32, from.value_or(0),
                              to.value_or(UINT64_MAX));
    if (!lines) return fail(kName, lines.error());
    std::fputs(format_trace(*lines, analysis->symbols).c_str(), stdout);
    return 0;
  }

  DecodeOptions dopt = analysis->decode_options();
  dopt.threads = static_cast<unsigned>(threads.value_or(0));
  dopt.align_window = window.value_or(kAlignAuto);
  bool progress = !opt.has("quiet") && ::isatty(2);
  if (progress)
    dopt.progress = [](uint64_t done, uint64_t total) {
      std::fprintf(stderr, "\rkthost report: decoded %s of %s PT (%.0f%%)   ", human_bytes(done).c_str(),
                   human_bytes(total).c_str(), total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
    };
  if (opt.has("coverage-only")) return coverage_only(opt, *analysis, dopt, progress);
  // The per-CPU table is a view of an all-CPU decode.
  auto profile = decode_profile(pt, *analysis->image, analysis->symbols, dopt);
  if (progress) std::fprintf(stderr, "\n");
  if (!profile) return fail(kName, profile.error());

  ReportOptions ropt;
  ropt.top = top.value_or(25);
  ropt.cpu = cpu32;
  ropt.callgraph = opt.has("callgraph");
  ropt.coverage = opt.has("coverage") || opt.get("module").has_value();
  ropt.coverage_module = opt.get_or("module", "");
  if (auto f = opt.get("folded")) {
    if (auto st = write_file_atomic(*f, folded_stacks(*profile, analysis->symbols)); !st) return fail(kName, st.error());
  }
  if (auto f = opt.get("flamegraph")) {
    std::string title = "kthost: " + opt.positionals().at(0);
    if (auto st = write_file_atomic(*f, flamegraph_svg(*profile, analysis->symbols, title)); !st)
      return fail(kName, st.error());
  }
  if (opt.has("json")) {
    std::fputs(format_report_json(*profile, analysis->symbols, ropt, analysis->bundle.losses).c_str(), stdout);
  } else {
    const auto& st = analysis->image->stats();
    std::printf("bundle %s: %zu CPUs, %zu events, %zu text records; image %lu versions (%lu pokes, %lu unmapped)\n",
                opt.positionals().at(0).c_str(), pt.size(), analysis->bundle.events.size(),
                analysis->bundle.text.records.size(), static_cast<unsigned long>(st.versions),
                static_cast<unsigned long>(st.pokes), static_cast<unsigned long>(st.pokes_unmapped));
    const auto& clock = analysis->bundle.manifest.clock;
    if (!clock.identity && clock.time_mult == 0)
      std::printf("clock: unknown (the trace ended before the guest sent its clock): text changes are placed at the "
                  "trace's start, and decode errors near them are likely\n");
    else if (clock.estimated)
      std::printf("clock: estimated from arrival times (the guest's perf clock was not its TSC): text changes may "
                  "be placed up to the fastest sideband delivery late\n");
    if (st.poke_quantum)
      std::printf("note: %lu pokes need more text versions than libipt holds: pokes within %lu PT time units share one\n",
                  static_cast<unsigned long>(st.pokes), static_cast<unsigned long>(st.poke_quantum));
    if (const auto& stale = analysis->symbols.stale_symbols();
        stale.dropped || !stale.modules_without_symbols.empty()) {
      std::string mods;
      for (const auto& m : stale.modules_without_symbols) mods += (mods.empty() ? "" : ", ") + m;
      std::printf("symbols: the guest's kallsyms predates its module list: %llu stale module symbols dropped; "
                  "modules named without functions (loaded after kallsyms was read): %s\n",
                  static_cast<unsigned long long>(stale.dropped), mods.empty() ? "none" : mods.c_str());
    }
    if (!analysis->bundle.losses.empty()) {
      std::string l;
      for (const auto& [k, v] : analysis->bundle.losses) l += " " + k + "=" + std::to_string(v);
      std::printf("losses:%s\n", l.c_str());
    }
    if (analysis->bundle.ignored_bytes)
      std::printf("note: %lu bytes past the last flush ignored (the writer was cut short)\n",
                  static_cast<unsigned long>(analysis->bundle.ignored_bytes));
    std::fputs(format_report_text(*profile, analysis->symbols, ropt).c_str(), stdout);
  }
  return 0;
}

CommandRegistration reg({kName, "decode a trace bundle: functions, call graph, flame graph, coverage, itrace", run});

}  // namespace
}  // namespace kt::cli
