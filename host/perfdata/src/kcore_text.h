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
  // Takes [start, end) out of every segment (splitting those it cuts through):
  // for text perf must get from elsewhere (a BPF program's comes from its
  // BPF_PROG_INFO, which perf attaches to whatever map holds its address).
  void cut(uint64_t start, uint64_t end);
  Status write(const std::string& path) const;

  const std::vector<Segment>& segments() const { return segments_; }
  uint64_t bytes() const;
  struct Overlap {
    uint64_t start = 0, end = 0;
    std::string origin;
  };
  // Ranges added while partly covered: only their uncovered parts became segments.
  const std::vector<Overlap>& overlaps() const { return overlaps_; }

 private:
  std::vector<Segment> segments_;
  std::vector<Overlap> overlaps_;
};

}  // namespace kt
