#include "kthost/decode/analysis.h"

namespace kt {

Result<Analysis> open_analysis(const std::string& bundle_dir, const std::string& vmlinux,
                               const BundleReadOptions& options) {
  Analysis a;
  KT_ASSIGN_OR_RETURN(a.bundle, read_bundle(bundle_dir, options));
  KT_ASSIGN_OR_RETURN(a.image, VersionedImage::from_bundle(a.bundle));
  KT_ASSIGN_OR_RETURN(a.symbols, Symbolizer::from_bundle(a.bundle));
  if (!vmlinux.empty()) KT_TRY(a.symbols.load_dwarf(vmlinux));
  return a;
}

}  // namespace kt
