// One call from a bundle directory to a decoded profile: read and validate
// the bundle, build the versioned image and the symbolizer, decode.
#pragma once

#include <memory>
#include <string>

#include "kthost/bundle/bundle.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/image.h"
#include "kthost/decode/pt_packet_check.h"
#include "kthost/decode/symbolizer.h"

namespace kt {

// How far the sideband's PT times may be off: 300 ms for a clock kthost
// trace estimated from arrival times (measured offsets: 1.5-70 ms under
// TCG, and one text poke 106-150 ms off), else 0 (the guest's own TSC
// clock: the align window covers it).
uint64_t clock_uncertainty(const BundleClock& clock);

struct Analysis {
  Bundle bundle;
  std::unique_ptr<VersionedImage> image;
  Symbolizer symbols;
  TaskSwitchLog task_switches;
  // Decode options that use all of the above (the task switch log).
  DecodeOptions decode_options() const {
    DecodeOptions o;
    o.task_switches = &task_switches;
    o.clock_uncertainty = clock_uncertainty(bundle.manifest.clock);
    return o;
  }
};

// The bundle's task_switches events in PT time, per CPU in order.
TaskSwitchLog task_switch_log(const Bundle& bundle);

// How a bundle is read for decoding: CRCs checked, and every PT packet.
inline BundleReadOptions analysis_read_options() {
  BundleReadOptions o;
  o.check_pt = check_pt_packets;
  return o;
}

// Reads the bundle and prepares the image and symbols (no decoding yet).
// `vmlinux` (may be empty) adds DWARF source lines.
Result<Analysis> open_analysis(const std::string& bundle_dir, const std::string& vmlinux = "",
                               const BundleReadOptions& options = analysis_read_options());

}  // namespace kt
