// The zero slack after a PT stream's end that libipt may read.
#include "kthost/bundle/bundle.h"

namespace kt {

void pad_pt_stream(std::vector<uint8_t>& pt) {
  size_t size = pt.size();
  pt.resize(size + kPtStreamSlack, 0);  // allocated and zeroed...
  pt.resize(size);                      // ...and kept as capacity: a byte vector's shrink frees nothing
}

bool pt_stream_is_padded(const std::vector<uint8_t>& pt) { return pt.capacity() - pt.size() >= kPtStreamSlack; }

}  // namespace kt
