// The text of the exported kcore: segments at guest virtual addresses,
// from the bundle's kcore and from text copied later.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

class KcoreText {
 public:
  struct Segment {
    uint64_t start = 0;
    std::vector<uint8_t> bytes;
  };
  // Every PT_LOAD of an ELF64 core file, bounds-checked (the file is untrusted).
  Status add_elf(const std::string& path);
  // `bytes` at `start`, unless a segment already covers any of it: text that
  // runs later reaches perf as TEXT_POKEs into these segments, so only ranges
  // no segment covers are added. A range that is partly covered is added
  // where it is not, and said in overlaps().
  void add(uint64_t start, const std::vector<uint8_t>& bytes, const std::string& origin);
  Status write(const std::string& path) const;

  const std::vector<Segment>& segments() const { return segments_; }
  uint64_t bytes() const;
  const std::vector<std::string>& overlaps() const { return overlaps_; }

 private:
  std::vector<Segment> segments_;
  std::vector<std::string> overlaps_;
};

}  // namespace kt
