// GuestMemory: reading guest-physical memory. Several real backends sit behind
// this one interface (mmap of the shared RAM backing, QEMU process memory), plus
// an in-memory buffer used by unit tests, fuzzers and benchmarks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

// One contiguous run of guest-physical RAM and where it lives in the backing
// (the memory-backend object, or the host virtual address range in QEMU).
struct RamRegion {
  uint64_t gpa = 0;             // first guest-physical address
  uint64_t size = 0;            // bytes
  uint64_t backing_offset = 0;  // offset of `gpa` in the backing
};

// Guest-physical address -> backing offset. q35 and pc split RAM around the
// PCI hole below 4 GiB; RAM above the split continues at 4 GiB.
class PhysMap {
 public:
  PhysMap() = default;
  explicit PhysMap(std::vector<RamRegion> regions);

  // The layout QEMU's x86 machines use for `ram_size` bytes of RAM when
  // `below_4g` bytes sit below the hole (see PhysMap::below_4g_for()).
  static PhysMap split_at(uint64_t ram_size, uint64_t below_4g);
  // QEMU 7.2's default split for a machine type ("q35" or "pc").
  static Result<uint64_t> below_4g_for(const std::string& machine, uint64_t ram_size);

  // Backing offset of [gpa, gpa+len) when it lies wholly inside one region.
  std::optional<uint64_t> to_offset(uint64_t gpa, uint64_t len) const;
  // The region holding `gpa`, or nullptr when it is not RAM.
  const RamRegion* region_at(uint64_t gpa) const;
  // Reads [gpa, gpa+len) run by run, split where RAM regions end: calls
  // read_run(backing_offset, dst, n) for each run, in order. OutOfRange (and
  // no further calls) at the first byte that is not RAM.
  template <typename ReadRun>
  Status read_runs(uint64_t gpa, void* out, size_t len, ReadRun&& read_run) const;
  // True when [gpa, gpa+len) is all RAM (possibly across regions).
  bool contains(uint64_t gpa, uint64_t len) const;
  const std::vector<RamRegion>& regions() const { return regions_; }
  uint64_t ram_size() const;
  // One past the highest guest-physical RAM address.
  uint64_t end() const;

 private:
  std::vector<RamRegion> regions_;  // sorted by gpa, non-overlapping
};

Error not_ram_error(uint64_t gpa);
// The backing offset of an 8-byte word a write may target: aligned, and
// wholly inside one RAM region.
Result<uint64_t> word_backing_offset(const PhysMap& map, uint64_t gpa);

template <typename ReadRun>
Status PhysMap::read_runs(uint64_t gpa, void* out, size_t len, ReadRun&& read_run) const {
  auto* dst = static_cast<uint8_t*>(out);
  while (len > 0) {
    const RamRegion* region = region_at(gpa);
    if (!region) return not_ram_error(gpa);
    size_t n = static_cast<size_t>(std::min<uint64_t>(len, region->gpa + region->size - gpa));
    KT_TRY(read_run(region->backing_offset + (gpa - region->gpa), dst, n));
    dst += n;
    gpa += n;
    len -= n;
  }
  return {};
}

class GuestMemory {
 public:
  virtual ~GuestMemory() = default;
  // Reads exactly `len` bytes of guest-physical memory at `gpa` into `out`.
  // The range may cross RAM regions. Errors: OutOfRange when any byte is not
  // guest RAM (nothing useful is written to `out` then), Io when the backing
  // could not be read.
  virtual Status read(uint64_t gpa, void* out, size_t len) const = 0;
  virtual const PhysMap& phys_map() const = 0;
  // Stores one 8-byte-aligned word of guest RAM. The only write kthost makes
  // to a guest: the ack word of a guard hold (ktguard's notice names it).
  // Errors: InvalidInput (unaligned), OutOfRange (not RAM), Io, Unsupported
  // (a backend that cannot write).
  virtual Status write_word(uint64_t gpa, uint64_t value);
  // "mmap", "process", "buffer", ...
  virtual std::string backend_name() const = 0;
};

// Guest memory held in a host buffer laid out as the backing (offset = backing_offset).
// Used for synthetic page tables in unit tests, fuzz targets and benchmarks.
class BufferMemory final : public GuestMemory {
 public:
  // Flat RAM at gpa 0..size.
  explicit BufferMemory(size_t size);
  BufferMemory(std::vector<uint8_t> bytes, PhysMap map);

  Status read(uint64_t gpa, void* out, size_t len) const override;
  const PhysMap& phys_map() const override { return map_; }
  Status write_word(uint64_t gpa, uint64_t value) override;
  std::string backend_name() const override { return "buffer"; }

  // Test helpers: write into the buffer at a guest-physical address.
  // Aborts on out-of-range addresses: tests must be exact.
  void write(uint64_t gpa, const void* data, size_t len);
  void write_u64(uint64_t gpa, uint64_t value) { write(gpa, &value, sizeof value); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
  PhysMap map_;
};

}  // namespace kt
