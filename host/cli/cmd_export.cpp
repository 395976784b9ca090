// kthost export BUNDLE -o DIR: the bundle as a perf data directory
// (perf.data plus kcore_dir), for perf script / perf report.
#include <cstdio>

#include "command.h"
#include "kthost/decode/analysis.h"
#include "kthost/perfdata/export.h"

namespace kt::cli {
namespace {

const char* kName = "export";

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.positional("BUNDLE", "trace bundle directory (docs/BUNDLE.md)");
  opt.value("output", "DIR", "the perf data directory to write (-o); perf reads it with -i DIR");
  opt.flag("json", "print the summary as JSON");
  std::vector<std::string> a = args;
  for (auto& s : a)
    if (s == "-o") s = "--output";
  if (auto exit_status = parse_command_line(opt, kName, a)) return *exit_status;
  auto out = opt.get("output");
  if (!out) return fail(kName, Error(ErrorCode::InvalidArgument, "-o DIR is required"));
  auto bundle = read_bundle(opt.positionals().at(0), analysis_read_options());
  if (!bundle) return fail(kName, bundle.error());
  PerfExportOptions o;
  o.out_dir = *out;
  o.cmdline = {"kthost", "export", opt.positionals().at(0), "-o", *out};
  auto s = export_perf_data(*bundle, o);
  if (!s) return fail(kName, s.error());
  if (opt.has("json")) {
    std::printf("{\"pt_bytes\": %lu, \"auxtrace_records\": %lu, \"ksymbols\": %lu, \"text_pokes\": %lu, "
                "\"load_pokes\": %lu, \"kcore_segments\": %lu, \"kcore_bytes\": %lu, \"data_bytes\": %lu, "
                "\"notes\": %zu}\n",
                s->pt_bytes, s->auxtrace_records, s->ksymbols, s->text_pokes, s->load_pokes, s->kcore_segments,
                s->kcore_bytes, s->data_bytes, s->notes.size());
  } else {
    std::printf("wrote %s: perf.data of %lu bytes (%lu bytes of PT in %lu AUXTRACE records), kcore_dir with %lu "
                "text segments (%lu bytes)\n",
                out->c_str(), s->data_bytes, s->pt_bytes, s->auxtrace_records, s->kcore_segments, s->kcore_bytes);
    std::printf("sideband: %lu ksymbols, %lu text pokes, %lu TEXT_POKEs carrying loaded text\n", s->ksymbols,
                s->text_pokes, s->load_pokes);
    if (!s->notes.empty()) {
      std::printf("note: %zu things perf.data cannot say:\n", s->notes.size());
      for (const auto& n : s->notes) std::printf("  %s\n", n.c_str());
    }
    std::printf("read it with: perf script -i %s --itrace=i1i   or   perf report -i %s --itrace=i100us --stdio\n",
                out->c_str(), out->c_str());
  }
  return 0;
}

const CommandRegistration kRegistration({kName, "write a bundle as a perf data directory (perf.data and kcore_dir)", run});

}  // namespace
}  // namespace kt::cli
