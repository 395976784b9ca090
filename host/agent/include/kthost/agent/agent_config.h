// What `kthost agent` is told: where to connect, which domains to trace,
// where bundles go, how they rotate, and the budgets that bound it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/trace/trace_session.h"

namespace kt {

// Every limit the agent keeps. 0 means no limit. Reaching one stops the
// tracing it concerns, and the stop is counted as a loss with the untraced
// time, in the status and the metrics.
struct Budgets {
  uint64_t total_disk_bytes = 0;   // all bundles under the output directory
  uint64_t domain_disk_bytes = 0;  // one domain's bundles
  uint64_t pt_bytes_per_second = 0;  // one domain's PT, over a 5 s window
  uint64_t memory_bytes = 0;       // the agent's resident memory
  double pt_cooldown_seconds = 30;  // how long a domain over its PT rate pauses
};

struct Rotation {
  uint64_t bytes = 0;      // start a new bundle past this many PT + text bytes (0: never)
  double seconds = 0;      // or after this long (0: never)
};

struct AgentConfig {
  std::string uri;                 // libvirt URI; qemu:///system when empty
  std::string output_dir;          // bundles go to DIR/<domain>/<boot-id>/<NNN>/
  std::vector<std::string> match;  // globs on the name or the metadata tag; empty: every domain
  Budgets budgets;
  Rotation rotation;
  TraceOptions trace;              // per-session options (out_dir is set per bundle)
  double retry_max_seconds = 60;   // the longest back-off between tries
};

}  // namespace kt
