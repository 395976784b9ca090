// Decode benchmark on a real bundle: one decoder, N runs, one JSON line per
// run and one with the process's peak RSS. tests/bench/run-decode-bundle-bench.sh
// runs each decoder in its own process (so each peak RSS is its own) and
// prints the table with ratios.
//   bench_decode_bundle BUNDLE --decoder D [--runs N] [--threads N]
// Decoders:
//   libipt-insn   libipt's instruction decoder, one stream after another
//   libipt-block  libipt's block decoder used plainly, the same way
//   kthost        kthost's decoder (decode_profile) with --threads (0: every
//                 core), and the report made from it; its phases are timed
//   coverage      kthost's coverage fast path (decode_coverage), --threads too;
//                 with --compare it is also checked against the full decoder's
//                 coverage (blocks, instructions per function) and the process
//                 exits 1 on any difference
// Every decoder gets the same versioned image (the bundle's text through time).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "kthost/decode/analysis.h"
#include "kthost/decode/coverage.h"
#include "kthost/decode/report.h"

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

int failed(const std::string& what) {
  std::fprintf(stderr, "bench_decode_bundle: %s\n", what.c_str());
  return 1;
}

int usage() {
  std::fprintf(stderr, "usage: bench_decode_bundle BUNDLE --decoder libipt-insn|libipt-block|kthost|coverage "
                       "[--runs N] [--threads N] [--compare]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string bundle_dir = argv[1], decoder;
  int runs = 3;
  unsigned threads = 0;
  bool compare = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--compare") compare = true;
    else if (i + 1 == argc) return usage();
    else if (a == "--decoder") decoder = argv[++i];
    else if (a == "--runs") runs = std::atoi(argv[++i]);
    else if (a == "--threads") threads = static_cast<unsigned>(std::atoi(argv[++i]));
    else return usage();
  }
  if (compare && decoder != "coverage") return usage();
  if (runs < 1 || (decoder != "libipt-insn" && decoder != "libipt-block" && decoder != "kthost" &&
                   decoder != "coverage"))
    return usage();

  // Load, once: the bundle (CRCs and every PT packet checked), the image, the symbols.
  auto t = Clock::now();
  auto bundle = kt::read_bundle(bundle_dir, kt::analysis_read_options());
  if (!bundle) return failed(bundle.error().message);
  const double load_s = since(t);
  t = Clock::now();
  auto image = kt::VersionedImage::from_bundle(*bundle);
  if (!image) return failed(image.error().message);
  const double image_s = since(t);
  t = Clock::now();
  auto symbols = kt::Symbolizer::from_bundle(*bundle);
  if (!symbols) return failed(symbols.error().message);
  const double symbols_s = since(t);
  const kt::TaskSwitchLog switches = kt::task_switch_log(*bundle);
  uint64_t pt_bytes = 0, largest_piece = 0;
  for (const auto& [cpu, data] : bundle->pt) {
    pt_bytes += data.size();
    for (const kt::Piece& p : kt::split_at_psb(cpu, data)) largest_piece = std::max(largest_piece, p.end - p.begin);
  }
  const long loaded_peak_kib = peak_rss_kib();  // bundle, image and symbols: before any decode

  kt::Coverage last_coverage;
  for (int run = 1; run <= runs; ++run) {
    nlohmann::json line{{"decoder", decoder}, {"run", run}, {"pt_bytes", pt_bytes}};
    uint64_t insns = 0;
    t = Clock::now();
    if (decoder == "kthost") {
      kt::DecodeOptions o;
      o.threads = threads;
      o.check_stack_edges = false;
      o.task_switches = &switches;
      auto profile = kt::decode_profile(bundle->pt, **image, *symbols, o);
      if (!profile) return failed(profile.error().message);
      const double decode_s = since(t);
      insns = profile->insns;
      nlohmann::json phases{{"load", load_s}, {"image", image_s}, {"symbols", symbols_s}};
      for (const auto& [name, s] : profile->phase_seconds) phases[name] = s;
      auto r = Clock::now();
      profile->stack_edges = kt::check_stack_edges(*profile, **image, *symbols);
      phases["stack_edges"] = since(r);
      r = Clock::now();
      kt::ReportOptions ro;
      ro.callgraph = ro.coverage = true;
      const size_t report_size = kt::format_report_json(*profile, *symbols, ro, {}).size() +
                                 kt::folded_stacks(*profile, *symbols).size();
      phases["report"] = since(r);
      line["threads"] = profile->threads;
      line["phases"] = phases;
      line["report_bytes"] = report_size;
      line["seconds"] = decode_s;
      line["decode_errors"] = profile->errors.size();
    } else if (decoder == "coverage") {
      kt::DecodeOptions o;
      o.threads = threads;
      auto cov = kt::decode_coverage(bundle->pt, **image, *symbols, o);
      if (!cov) return failed(cov.error().message);
      line["seconds"] = since(t);
      insns = cov->insns;
      nlohmann::json phases{{"load", load_s}, {"image", image_s}, {"symbols", symbols_s}};
      for (const auto& [name, s] : cov->phase_seconds) phases[name] = s;
      line["phases"] = phases;
      line["threads"] = cov->threads;
      line["blocks"] = cov->blocks_seen.size();
      line["functions"] = cov->function_insns.size();
      line["pieces"] = cov->pieces;
      line["fast_pieces"] = cov->fast_pieces;
      line["fallback_bytes"] = cov->fallback_bytes;
      line["fallback_reasons"] = cov->fallback_reasons;
      last_coverage = std::move(*cov);
    } else {
      for (const auto& [cpu, data] : bundle->pt) {
        auto n = decoder == "libipt-insn" ? kt::count_insns_baseline(data, **image)
                                          : kt::count_insns_block_baseline(data, **image);
        if (!n) return failed("cpu " + std::to_string(cpu) + ": " + n.error().message);
        insns += *n;
      }
      line["threads"] = 1;
      line["seconds"] = since(t);
    }
    line["insns"] = insns;
    line["peak_rss_kib_so_far"] = peak_rss_kib();
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  // The decoder's own peak: the full decode --compare runs next is not its.
  const long decoder_peak_kib = peak_rss_kib();
  if (compare) {
    kt::DecodeOptions o;
    o.threads = threads;
    o.check_stack_edges = false;
    o.task_switches = &switches;
    auto profile = kt::decode_profile(bundle->pt, **image, *symbols, o);
    if (!profile) return failed(profile.error().message);
    const auto diffs = kt::coverage_differences(last_coverage, kt::coverage_of(*profile), *symbols, 20);
    nlohmann::json check{{"decoder", decoder}, {"compare", "full decoder"}, {"differences", diffs.count},
                         {"examples", diffs.examples}, {"blocks", last_coverage.blocks_seen.size()},
                         {"functions", last_coverage.function_insns.size()}, {"insns", last_coverage.insns}};
    std::printf("%s\n", check.dump().c_str());
    if (diffs.count) return 1;
  }
  nlohmann::json last{{"decoder", decoder},
                      {"peak_rss_kib", decoder_peak_kib},
                      {"loaded_peak_rss_kib", loaded_peak_kib},
                      {"largest_piece_bytes", largest_piece},
                      {"image_bytes", (*image)->stats().bytes},
                      {"pt_bytes", pt_bytes}};
  std::printf("%s\n", last.dump().c_str());
  return 0;
}
