// A PT stream read back from disk, checked packet by packet before anything
// decodes it: the first packet libipt cannot read is an error naming its offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kthost/bundle/pt_stream.h"
#include "kthost/common/result.h"

namespace kt {

// InvalidInput "NAME: at offset N: ..." when the stream does not start with a
// PSB or holds a packet that does not decode. An empty stream is fine. Fits
// BundleReadOptions::check_pt.
Status check_pt_packets(const std::string& name, const PtStream& pt);

}  // namespace kt
