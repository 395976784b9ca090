// `kthost export`: a bundle as a perf data directory, laid out as
// `perf record --kcore -o DIR` makes it, so that Debian's perf decodes the
// guest kernel's trace with no extra options:
//
//   DIR/data                 perf.data: an intel_pt event, AUXTRACE_INFO with
//                            the bundle's clock, the PT of each vCPU as
//                            AUXTRACE records, the kernel map, KSYMBOL and
//                            TEXT_POKE records for everything the guest
//                            changed, in time order
//   DIR/kcore_dir/kcore      the guest's kernel and module text (ELF core)
//   DIR/kcore_dir/kallsyms   the guest's /proc/kallsyms at trace start
//   DIR/kcore_dir/modules    the guest's /proc/modules at trace start
//
// Text that appears after the start, or changes, reaches perf as records at
// its time: each single-function BPF program as perf record writes it (a BPF
// KSYMBOL and a BPF_EVENT, its JIT bytes in the BPF_PROG_INFO feature); each
// other ksymbol (BPF programs with several functions, other out-of-line code)
// as an out-of-line KSYMBOL whose bytes come in a TEXT_POKE; each module load
// as TEXT_POKEs of the text copied at load; every poke the guest made as a
// TEXT_POKE. What perf cannot represent is counted and said.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kthost/bundle/bundle.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/symbolizer.h"
#include "kthost/common/result.h"

namespace kt {

// Something perf.data cannot say. When end > start it is about the text in
// [start, end), and count_note_instructions() says how much of the trace ran
// there (by kthost's decode).
struct ExportNote {
  ExportNote(std::string what, uint64_t range_start = 0, uint64_t range_end = 0)
      : text(std::move(what)), start(range_start), end(range_end) {}
  std::string text;
  uint64_t start = 0, end = 0;
  std::optional<uint64_t> insns;  // instructions kthost decoded in functions starting in the range
};

struct PerfExportSummary {
  uint64_t pt_bytes = 0, auxtrace_records = 0;
  uint64_t ksymbols = 0, text_pokes = 0, load_pokes = 0;
  uint64_t bpf_programs = 0, bpf_events = 0;
  uint64_t aux_flag_records = 0;  // PERF_RECORD_AUX carrying the hardware ring's truncation/partial/collision  // programs in BPF_PROG_INFO; BPF_EVENT records
  uint64_t lost_records = 0;  // guest perf-ring records lost, as PERF_RECORD_LOST  // load_pokes: TEXT_POKEs carrying loaded text
  uint64_t kcore_segments = 0, kcore_bytes = 0;
  uint64_t data_bytes = 0;
  // What the export could not say to perf, one each ("where: what").
  std::vector<ExportNote> notes;
  bool notes_have_ranges() const;
};

struct PerfExportOptions {
  std::string out_dir;
  std::vector<std::string> cmdline;  // for the CMDLINE feature
};

// Errors: InvalidArgument (no kallsyms in the bundle, unknown clock), Io.
Result<PerfExportSummary> export_perf_data(const Bundle& bundle, const PerfExportOptions& options);

// Sets each ranged note's insns: the instructions of the decoded profile in
// functions whose start lies in the note's range, over the whole trace.
void count_note_instructions(std::vector<ExportNote>& notes, const Profile& profile, const Symbolizer& symbols);

}  // namespace kt
