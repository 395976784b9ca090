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
// its time: each ksymbol (BPF programs, trampolines, other out-of-line code)
// as an out-of-line KSYMBOL whose bytes come in a TEXT_POKE; each module load
// as TEXT_POKEs of the text copied at load; every poke the guest made as a
// TEXT_POKE. What perf cannot represent is counted and said.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kthost/bundle/bundle.h"
#include "kthost/common/result.h"

namespace kt {

struct PerfExportSummary {
  uint64_t pt_bytes = 0, auxtrace_records = 0;
  uint64_t ksymbols = 0, text_pokes = 0, load_pokes = 0;
  uint64_t lost_records = 0;  // guest perf-ring records lost, as PERF_RECORD_LOST  // load_pokes: TEXT_POKEs carrying loaded text
  uint64_t kcore_segments = 0, kcore_bytes = 0;
  uint64_t data_bytes = 0;
  // What the export could not say to perf, one line each ("where: what").
  std::vector<std::string> notes;
};

struct PerfExportOptions {
  std::string out_dir;
  std::vector<std::string> cmdline;  // for the CMDLINE feature
};

// Errors: InvalidArgument (no kallsyms in the bundle, unknown clock), Io.
Result<PerfExportSummary> export_perf_data(const Bundle& bundle, const PerfExportOptions& options);

}  // namespace kt
