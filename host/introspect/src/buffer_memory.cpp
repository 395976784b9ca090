// BufferMemory: guest RAM held in a host vector, for tests, fuzzers and benches.
// The PhysMap may describe more RAM than the vector holds (a fuzzer's map is
// guest-chosen), so every access checks both the map and the vector size.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kthost/common/strings.h"
#include "kthost/introspect/guest_memory.h"

namespace kt {
namespace {

// Largest chunk of [gpa, gpa+len) that lies in one region and in the buffer;
// 0 when gpa itself is not backed.
struct Chunk {
  uint64_t offset = 0;
  uint64_t len = 0;
};

Chunk backed_chunk(const PhysMap& map, size_t buffer_size, uint64_t gpa, uint64_t len) {
  // Try the whole range first: the common case is one region, one lookup.
  if (auto off = map.to_offset(gpa, len); off && *off <= buffer_size && len <= buffer_size - *off) {
    return {*off, len};
  }
  auto start = map.to_offset(gpa, 1);
  if (!start || *start >= buffer_size) return {};
  uint64_t in_buffer = buffer_size - *start;
  // Only reads that cross a region or the buffer's end get here; a linear
  // scan of the (few) regions keeps it simple.
  uint64_t in_region = 0;
  for (const RamRegion& r : map.regions()) {
    if (gpa >= r.gpa && gpa - r.gpa < r.size) {
      in_region = r.size - (gpa - r.gpa);
      break;
    }
  }
  uint64_t n = len;
  if (n > in_region) n = in_region;
  if (n > in_buffer) n = in_buffer;
  return {*start, n};
}

Error out_of_range(uint64_t gpa, size_t len, uint64_t bad) {
  return Error(ErrorCode::OutOfRange, "guest-physical read of " + std::to_string(len) +
                                          " bytes at " + hex(gpa) + ": " + hex(bad) +
                                          " is not guest RAM");
}

}  // namespace

BufferMemory::BufferMemory(size_t size)
    : bytes_(size), map_(std::vector<RamRegion>{{0, size, 0}}) {}

BufferMemory::BufferMemory(std::vector<uint8_t> bytes, PhysMap map)
    : bytes_(std::move(bytes)), map_(std::move(map)) {}

Status BufferMemory::read(uint64_t gpa, void* out, size_t len) const {
  if (len == 0) return ok_status();
  Chunk whole = backed_chunk(map_, bytes_.size(), gpa, len);
  if (whole.len == len) {
    std::memcpy(out, bytes_.data() + whole.offset, len);
    return ok_status();
  }
  // Crossing regions: check every byte is backed before writing any, so a
  // failed read leaves `out` untouched.
  uint64_t at = gpa;
  uint64_t left = len;
  while (left > 0) {
    Chunk c = backed_chunk(map_, bytes_.size(), at, left);
    if (c.len == 0) return out_of_range(gpa, len, at);
    at += c.len;
    left -= c.len;
    // The last byte of the address space has no successor to continue from.
    if (left > 0 && at == 0) return out_of_range(gpa, len, at);
  }
  auto* dst = static_cast<uint8_t*>(out);
  at = gpa;
  left = len;
  while (left > 0) {
    Chunk c = backed_chunk(map_, bytes_.size(), at, left);
    std::memcpy(dst, bytes_.data() + c.offset, c.len);
    dst += c.len;
    at += c.len;
    left -= c.len;
  }
  return ok_status();
}

Status BufferMemory::write_word(uint64_t gpa, uint64_t value) {
  KT_ASSIGN_OR_RETURN(uint64_t off, word_backing_offset(map_, gpa));
  if (off > bytes_.size() || bytes_.size() - off < 8) return out_of_range(gpa, 8, gpa);
  std::memcpy(bytes_.data() + off, &value, 8);
  return ok_status();
}

void BufferMemory::write(uint64_t gpa, const void* data, size_t len) {
  const auto* src = static_cast<const uint8_t*>(data);
  uint64_t at = gpa;
  uint64_t left = len;
  while (left > 0) {
    Chunk c = backed_chunk(map_, bytes_.size(), at, left);
    if (c.len == 0 || (left > c.len && at + c.len == 0)) {
      // Tests must be exact: a stray write means the test itself is wrong.
      std::fprintf(stderr, "BufferMemory::write: %s (+%zu) is not backed RAM\n",
                   hex(at).c_str(), len);
      std::abort();
    }
    std::memcpy(bytes_.data() + c.offset, src, c.len);
    src += c.len;
    at += c.len;
    left -= c.len;
  }
}

}  // namespace kt
