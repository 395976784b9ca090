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

struct Analysis {
  Bundle bundle;
  std::unique_ptr<VersionedImage> image;
  Symbolizer symbols;
};

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
