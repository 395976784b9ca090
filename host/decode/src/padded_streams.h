// PT streams as libipt may read them: with kPtStreamSlack zero bytes after
// their end (see kthost/bundle/bundle.h). A Bundle's streams already are;
// any other buffer (a test's, a fuzzer's) is copied once, here.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "kthost/bundle/bundle.h"

namespace kt {

using PtStreams = std::map<uint32_t, std::vector<uint8_t>>;

// `pt` itself when it is padded, else a padded copy kept in `copy`.
inline const std::vector<uint8_t>& padded_stream(const std::vector<uint8_t>& pt, std::vector<uint8_t>& copy) {
  if (pt_stream_is_padded(pt)) return pt;
  copy.reserve(pt.size() + kPtStreamSlack);
  copy.assign(pt.begin(), pt.end());
  pad_pt_stream(copy);
  return copy;
}

// `pt` itself when every stream is padded, else padded copies kept in `copies`.
inline const PtStreams& padded_streams(const PtStreams& pt, PtStreams& copies) {
  bool all = true;
  for (const auto& [cpu, data] : pt) all = all && pt_stream_is_padded(data);
  if (all) return pt;
  for (const auto& [cpu, data] : pt) padded_stream(data, copies[cpu]);
  return copies;
}

}  // namespace kt
