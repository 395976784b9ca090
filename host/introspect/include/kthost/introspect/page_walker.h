// PageWalker: x86-64 guest-virtual -> guest-physical translation by walking
// the guest's page tables in guest RAM, with a small translation cache.
//
// The tables are guest-controlled bytes: every walk is depth-bounded, reads only
// guest RAM, and turns malformed entries into errors instead of following them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/introspect/guest_memory.h"

namespace kt {

enum class PagingMode { Level4, Level5 };

struct PagingConfig {
  PagingMode mode = PagingMode::Level4;
  // Guest-physical address of the top table (PML4 or PML5); bits 11:0 are ignored.
  uint64_t root = 0;
  // MAXPHYADDR. Entry address bits from here up to 51 are reserved. Values
  // outside [12, 52] are clamped into it.
  unsigned max_phys_bits = 52;
};

// One leaf mapping: the whole page that contains the looked-up address.
struct Translation {
  uint64_t virt_page = 0;  // canonical virtual address of the page's first byte
  uint64_t phys_page = 0;  // guest-physical address of the page's first byte
  uint64_t page_size = 0;  // 4 KiB, 2 MiB or 1 GiB
  bool writable = false;   // R/W set at every level
  bool user = false;       // U/S set at every level
  bool executable = false; // NX clear at every level

  // Guest-physical address of `vaddr`, which must lie in this page.
  uint64_t phys(uint64_t vaddr) const { return phys_page + (vaddr & (page_size - 1)); }
};

// Not thread-safe: translate(), virt_to_phys(), read_virtual() and
// flush_cache() update the cache. walk() and for_each_mapping() are const and
// may run concurrently with each other.
class PageWalker {
 public:
  // `mem` must outlive the walker. `cache_entries` is rounded up to a power of
  // two and clamped to [1, 1<<22]; each of the three page sizes gets that many
  // direct-mapped slots.
  PageWalker(const GuestMemory& mem, PagingConfig cfg, size_t cache_entries = 4096);

  // Walks the tables for `vaddr`, without the cache. Errors (each message names
  // the virtual address, the level, the entry's physical address and value):
  //   NonCanonical  vaddr is not canonical for the paging mode
  //   NotPresent    an entry on the path has P clear
  //   ReservedBits  an entry has address bits set at or above max_phys_bits,
  //                 PS set in a PML5E/PML4E, or a large-page entry has bits
  //                 set between 13 and the page's alignment (29:13 for 1 GiB,
  //                 20:13 for 2 MiB)
  //   OutOfRange    a table page, or the whole final page, is not guest RAM
  //   Cycle         a non-leaf entry points at a table already on this walk
  //   anything the GuestMemory read returns (e.g. Io)
  Result<Translation> walk(uint64_t vaddr) const;

  // walk() through the cache. Only successful translations are cached; a
  // cached translation stays until flush_cache(), so flush after the guest
  // may have changed its tables (or when switching address spaces).
  Result<Translation> translate(uint64_t vaddr);
  // translate(vaddr)->phys(vaddr).
  Result<uint64_t> virt_to_phys(uint64_t vaddr);
  // Reads `len` bytes of guest-virtual memory, page by page. Errors: those of
  // translate() for the first address that does not translate (its message
  // names that address), OutOfRange when [vaddr, vaddr+len) wraps past 2^64,
  // and those of GuestMemory::read. `out` may be partly written on error.
  Status read_virtual(uint64_t vaddr, void* out, size_t len);

  void flush_cache();
  // Walks from another top table from now on (the cache is flushed). Not
  // thread-safe, as translate() is not.
  void set_root(uint64_t root);
  struct CacheStats {
    uint64_t hits = 0;
    uint64_t misses = 0;
  };
  CacheStats cache_stats() const { return {hits_, misses_}; }

  // Calls `fn` for every leaf mapping whose page intersects [start, end), in
  // ascending virtual address order, one call per page table entry (nothing
  // merged, pages not clipped to the range). Exactly the pages for which walk()
  // would succeed are reported: entries walk() rejects (not present, reserved
  // bits, outside RAM, cycles) are skipped silently. Returns OK when done or
  // when `fn` returns false. Errors: LimitExceeded when more than `max_tables`
  // table pages (counting repeats) would be read; errors of GuestMemory::read
  // other than OutOfRange.
  Status for_each_mapping(uint64_t start, uint64_t end,
                          const std::function<bool(const Translation&)>& fn,
                          size_t max_tables = size_t{1} << 20) const;

  const PagingConfig& config() const { return cfg_; }

  static bool is_canonical(uint64_t vaddr, PagingMode mode);
  // Page-table root from CR3: drops bits 11:0 (the PCID when CR4.PCIDE, bit 17,
  // is set; PWT/PCD otherwise; neither is part of the 4 KiB-aligned address),
  // bit 63 (the PCID no-flush hint) and every bit at or above max_phys_bits
  // (e.g. LAM's 62:61).
  static uint64_t root_from_cr3(uint64_t cr3, uint64_t cr4, unsigned max_phys_bits = 52);
  // CR4.LA57 (bit 12) selects 5-level paging.
  static PagingMode mode_from_cr4(uint64_t cr4);
  // With PTI the kernel and user PGDs are an 8 KiB-aligned pair (user at +4 KiB);
  // returns the kernel one (bit 12 cleared).
  static uint64_t pti_kernel_root(uint64_t root) { return root & ~uint64_t{0x1000}; }

 private:
  struct CacheEntry {
    uint64_t virt_page;   // tag; kEmptyTag (never page-aligned) when unused
    uint64_t phys_flags;  // phys_page | flag bits in 11:0
  };
  struct EnumState;

  Status visit_table(EnumState& st, unsigned level, uint64_t table, uint64_t vprefix,
                     bool writable, bool user, bool executable) const;

  const GuestMemory& mem_;
  PagingConfig cfg_;
  uint64_t addr_mask_;      // entry bits that form a physical address (51:12, below max_phys_bits)
  uint64_t reserved_mask_;  // entry bits max_phys_bits..51
  uint64_t cache_mask_;
  std::vector<CacheEntry> cache_;  // three banks: 4 KiB, 2 MiB, 1 GiB pages
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace kt
