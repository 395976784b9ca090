// What to ask intel_pt for, and the perf_event_attr that asks for it.
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kthost/common/result.h"
#include "kthost/pt/pmu.h"

namespace kt {

// Periods are in the hardware's encoding (the value of the RTIT_CTL field),
// because that is what the caps bitmaps list: value n is allowed when bit n of
// the matching caps file is set.
struct PtConfig {
  // PSB every 2^(11+n) bytes of trace. nullopt: 4 KiB (n=1) when the CPU lists
  // it, else the hardware default. A PSB is where a decoder can start, so
  // frequent PSBs bound what an overflow costs and let decode run in parallel.
  std::optional<unsigned> psb_period;
  bool tsc = true;             // TSC packets: the trace's clock
  bool mtc = true;             // MTC packets between TSCs for finer time
  unsigned mtc_period = 3;     // MTC every 2^n crystal-clock ticks
  bool cyc = false;            // cycle-accurate mode: much more trace
  unsigned cyc_threshold = 0;  // CYC after 2^(n-1) cycles (0: every opportunity)
  bool noretcomp = true;       // the decoder expects no return compression
  bool branch_en = true;       // COFI packets: without them there is no control flow
  bool kernel_only = true;     // exclude_user: guest kernels run at CPL 0
  uint64_t aux_bytes = 4u << 20;   // AUX (trace) ring: a power of two pages
  uint64_t data_bytes = 64u << 10; // data (record) ring: a power of two pages
};

// The user's words for a PtConfig (kthost trace --pt-psb N, --pt-mtc N|off,
// --pt-cyc N, --pt-no-tsc); each absent value keeps the default. Errors:
// InvalidArgument naming the option when a number is not 0..15.
struct PtConfigWords {
  std::optional<std::string> psb, mtc, cyc;
  bool no_tsc = false;
};
Result<PtConfig> parse_pt_config(const PtConfigWords& words);

// Encoded PSB period value for 4 KiB.
inline constexpr unsigned kPsbPeriod4KiB = 1;

// Builds the perf_event_attr for intel_pt on `pmu`: each field placed at the
// bits the PMU's format files give, each choice checked against the caps the
// kernel would check. The event starts disabled. Errors:
//   Unsupported      the PMU lacks a format field or capability a choice needs
//   InvalidArgument  a value is out of range or not in the caps bitmap
Result<perf_event_attr> build_intel_pt_attr(const PtPmu& pmu, const PtConfig& config);

// Checks ring sizes: non-zero powers of two, whole pages. InvalidArgument otherwise.
Status validate_ring_sizes(const PtConfig& config, uint64_t page_size);

}  // namespace kt
