// PhysMap: guest-physical RAM layout and the gpa -> backing offset lookup.
// Every bound is computed as "bytes left in the region" instead of gpa+len so
// that addresses near UINT64_MAX (from untrusted page tables) cannot wrap.
#include <algorithm>
#include <limits>

#include "kthost/common/strings.h"
#include "kthost/introspect/guest_memory.h"

namespace kt {
namespace {

constexpr uint64_t kFourGiB = 0x1'0000'0000ULL;

// Bytes from `gpa` to the end of `r`; the caller guarantees r.gpa <= gpa.
// A region may reach the top of the address space, where r.gpa + r.size is
// 2^64; size - (gpa - r.gpa) never overflows.
uint64_t bytes_left(const RamRegion& r, uint64_t gpa) { return r.size - (gpa - r.gpa); }

// The region containing `gpa`, or nullptr.
const RamRegion* find_region(const std::vector<RamRegion>& regions, uint64_t gpa) {
  // First region starting after gpa; the one before it is the only candidate.
  auto it = std::upper_bound(regions.begin(), regions.end(), gpa,
                             [](uint64_t a, const RamRegion& r) { return a < r.gpa; });
  if (it == regions.begin()) return nullptr;
  const RamRegion& r = *std::prev(it);
  return gpa - r.gpa < r.size ? &r : nullptr;
}

}  // namespace

PhysMap::PhysMap(std::vector<RamRegion> regions) {
  // A stable sort keeps the caller's order among regions at the same gpa, so
  // "keep the first" below means the first one the caller listed there.
  std::stable_sort(regions.begin(), regions.end(),
                   [](const RamRegion& a, const RamRegion& b) { return a.gpa < b.gpa; });
  regions_.reserve(regions.size());
  for (RamRegion r : regions) {
    if (r.size == 0) continue;
    // A region cannot extend past 2^64; clip it rather than let bounds wrap.
    const uint64_t room = std::numeric_limits<uint64_t>::max() - r.gpa;
    if (r.size - 1 > room) r.size = room + 1;
    // Overlapping regions are a programming error in the caller (QEMU never
    // reports them). We keep the earlier region and drop the overlapping one
    // whole, so every gpa still has exactly one backing offset.
    if (!regions_.empty()) {
      const RamRegion& last = regions_.back();
      if (r.gpa - last.gpa < last.size) continue;
    }
    regions_.push_back(r);
  }
}

PhysMap PhysMap::split_at(uint64_t ram_size, uint64_t below_4g) {
  below_4g = std::min(below_4g, ram_size);
  std::vector<RamRegion> regions;
  regions.push_back({0, below_4g, 0});
  if (ram_size > below_4g) regions.push_back({kFourGiB, ram_size - below_4g, below_4g});
  return PhysMap(std::move(regions));
}

Result<uint64_t> PhysMap::below_4g_for(const std::string& machine, uint64_t ram_size) {
  // Mirrors QEMU 7.2 hw/i386/pc_q35.c and pc_piix.c (gigabyte_align on).
  uint64_t lowmem = 0;
  if (machine == "q35") {
    lowmem = ram_size >= 0xb000'0000ULL ? 0x8000'0000ULL : 0xb000'0000ULL;
  } else if (machine == "pc") {
    lowmem = ram_size >= 0xe000'0000ULL ? 0xc000'0000ULL : 0xe000'0000ULL;
  } else {
    return Error(ErrorCode::Unsupported,
                 "machine type '" + sanitize_name(machine, 64) +
                     "' has no known RAM split (only q35 and pc are supported)");
  }
  return std::min(ram_size, lowmem);
}

std::optional<uint64_t> PhysMap::to_offset(uint64_t gpa, uint64_t len) const {
  const RamRegion* r = find_region(regions_, gpa);
  if (r == nullptr || len > bytes_left(*r, gpa)) return std::nullopt;
  return r->backing_offset + (gpa - r->gpa);
}

bool PhysMap::contains(uint64_t gpa, uint64_t len) const {
  const RamRegion* r = find_region(regions_, gpa);
  if (r == nullptr) return false;
  // Walk forward through regions that are exactly adjacent; each step
  // consumes a whole region, so this ends after at most regions_.size() steps.
  for (;;) {
    const uint64_t left = bytes_left(*r, gpa);
    if (len <= left) return true;
    len -= left;
    const RamRegion* next = r + 1;
    if (next == regions_.data() + regions_.size()) return false;
    // gpa + left is the end of r; it is 2^64 (wrapped to 0) only for a region
    // reaching the top, and then no region can follow it.
    const uint64_t end = gpa + left;
    if (end == 0 || next->gpa != end) return false;
    gpa = end;
    r = next;
  }
}

uint64_t PhysMap::ram_size() const {
  uint64_t total = 0;
  for (const RamRegion& r : regions_) total += r.size;
  return total;
}

uint64_t PhysMap::end() const {
  if (regions_.empty()) return 0;
  const RamRegion& last = regions_.back();
  // Saturates for a region that reaches the top of the address space.
  const uint64_t room = std::numeric_limits<uint64_t>::max() - last.gpa;
  return last.size > room ? std::numeric_limits<uint64_t>::max() : last.gpa + last.size;
}

const RamRegion* PhysMap::region_at(uint64_t gpa) const {
  for (const auto& r : regions_)
    if (gpa >= r.gpa && gpa - r.gpa < r.size) return &r;
  return nullptr;
}

Error not_ram_error(uint64_t gpa) {
  return Error(ErrorCode::OutOfRange, "guest-physical " + hex(gpa) + " is not RAM");
}

Result<uint64_t> word_backing_offset(const PhysMap& map, uint64_t gpa) {
  if (gpa % 8) return Error(ErrorCode::InvalidInput, "guest-physical word " + hex(gpa) + " is not 8-byte aligned");
  auto off = map.to_offset(gpa, 8);
  if (!off) return not_ram_error(gpa);
  return *off;
}

Status GuestMemory::write_word(uint64_t gpa, uint64_t) {
  return Error(ErrorCode::Unsupported, "the " + backend_name() + " memory backend cannot write guest RAM (word at " +
                                           hex(gpa) + ")");
}

}  // namespace kt
