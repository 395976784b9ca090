// kthost export BUNDLE -o DIR: the bundle as a perf data directory
// (perf.data plus kcore_dir), for perf script / perf report.
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "command.h"
#include "kthost/common/strings.h"
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
  opt.flag("quiet", "no progress on stderr");
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
  // Notes about text: how much of the trace ran there, by kthost's decode.
  if (s->notes_have_ranges()) {
    bool progress = !opt.has("quiet") && ::isatty(2);
    if (progress) std::fprintf(stderr, "kthost export: decoding, to count the instructions the notes concern\n");
    auto analysis = open_analysis(opt.positionals().at(0));
    if (!analysis) return fail(kName, analysis.error());
    auto profile = decode_profile(analysis->bundle.pt, *analysis->image, analysis->symbols, analysis->decode_options());
    if (!profile) return fail(kName, profile.error());
    count_note_instructions(s->notes, *profile, analysis->symbols);
  }
  auto note_text = [](const ExportNote& n) {
    return n.insns ? n.text + "; kthost decoded " + std::to_string(*n.insns) + " instructions there" : n.text;
  };
  if (opt.has("json")) {
    nlohmann::json notes = nlohmann::json::array();
    for (const auto& n : s->notes) {
      nlohmann::json j = {{"text", n.text}};
      if (n.end > n.start) j["start"] = hex(n.start), j["end"] = hex(n.end);
      if (n.insns) j["insns"] = *n.insns;
      notes.push_back(j);
    }
    nlohmann::json j = {{"pt_bytes", s->pt_bytes},           {"auxtrace_records", s->auxtrace_records},
                        {"ksymbols", s->ksymbols},           {"bpf_programs", s->bpf_programs},
                        {"bpf_events", s->bpf_events},       {"text_pokes", s->text_pokes},
                        {"load_pokes", s->load_pokes},       {"lost_records", s->lost_records},
                        {"kcore_segments", s->kcore_segments}, {"kcore_bytes", s->kcore_bytes},
                        {"aux_flag_records", s->aux_flag_records},
                        {"data_bytes", s->data_bytes},       {"notes", notes}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("wrote %s: perf.data of %lu bytes (%lu bytes of PT in %lu AUXTRACE records), kcore_dir with %lu "
                "text segments (%lu bytes)\n",
                out->c_str(), s->data_bytes, s->pt_bytes, s->auxtrace_records, s->kcore_segments, s->kcore_bytes);
    std::printf("sideband: %lu ksymbols (%lu BPF programs with their info), %lu text pokes, %lu TEXT_POKEs "
                "carrying loaded text, %lu lost-record counts, %lu AUX loss flags\n",
                s->ksymbols, s->bpf_programs, s->text_pokes, s->load_pokes, s->lost_records, s->aux_flag_records);
    if (!s->notes.empty()) {
      std::printf("note: %zu things perf.data cannot say:\n", s->notes.size());
      for (const auto& n : s->notes) std::printf("  %s\n", note_text(n).c_str());
    }
    std::printf("read it with: perf script -i %s --itrace=i1i   or   perf report -i %s --itrace=i100us --stdio\n",
                out->c_str(), out->c_str());
  }
  return 0;
}

const CommandRegistration kRegistration({kName, "write a bundle as a perf data directory (perf.data and kcore_dir)", run});

}  // namespace
}  // namespace kt::cli
