// One call from a bundle directory to a decoded profile: read and validate
// the bundle, build the versioned image and the symbolizer, decode.
#pragma once

#include <memory>
#include <string>

#include "kthost/bundle/bundle.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/image.h"
#include "kthost/decode/symbolizer.h"

namespace kt {

struct Analysis {
  Bundle bundle;
  std::unique_ptr<VersionedImage> image;
  Symbolizer symbols;
};

// Reads the bundle and prepares the image and symbols (no decoding yet).
// `vmlinux` (may be empty) adds DWARF source lines.
Result<Analysis> open_analysis(const std::string& bundle_dir, const std::string& vmlinux = "",
                               const BundleReadOptions& options = {});

}  // namespace kt
