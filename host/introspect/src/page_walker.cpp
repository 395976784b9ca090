// x86-64 page walk over guest RAM (Intel SDM vol. 3A, 4.5 "4-level and 5-level
// paging"). The entries are guest-controlled: nothing here trusts them beyond
// what a CPU would, and every walk ends after at most five reads.
#include "kthost/introspect/page_walker.h"

#include <algorithm>
#include <array>

#include "kthost/common/strings.h"

namespace kt {
namespace {

constexpr uint64_t kPageSize = 4096;
constexpr unsigned kEntries = 512;

constexpr uint64_t kPresent = 1ULL << 0;
constexpr uint64_t kWritable = 1ULL << 1;
constexpr uint64_t kUser = 1ULL << 2;
constexpr uint64_t kPageSizeBit = 1ULL << 7;
constexpr uint64_t kNoExecute = 1ULL << 63;
constexpr uint64_t kAddressBits = 0x000f'ffff'ffff'f000ULL;  // 51:12

// Levels from the top; a 4-level walk starts at index 1.
constexpr unsigned kPml5 = 0, kPml4 = 1, kPt = 4;  // PDPT = 2, PD = 3
constexpr std::array<const char*, 5> kLevelName = {"PML5", "PML4", "PDPT", "PD", "PT"};
constexpr std::array<unsigned, 5> kLevelShift = {48, 39, 30, 21, 12};

// Cache banks, in lookup order, and the flag bits packed under phys_page.
constexpr std::array<unsigned, 3> kBankShift = {12, 21, 30};
constexpr uint64_t kCacheWritable = 1, kCacheUser = 2, kCacheExecutable = 4;
constexpr uint64_t kEmptyTag = 1;  // no page starts at an odd address

unsigned first_level(PagingMode mode) { return mode == PagingMode::Level5 ? kPml5 : kPml4; }
unsigned va_bits(PagingMode mode) { return mode == PagingMode::Level5 ? 57 : 48; }

uint64_t sign_extend(uint64_t vaddr, unsigned bits) {
  const unsigned unused = 64 - bits;
  return static_cast<uint64_t>(static_cast<int64_t>(vaddr << unused) >> unused);
}

// Bits 20:13 (2 MiB) or 29:13 (1 GiB): a large page's address must be aligned
// to its size; bit 12 is PAT there, not an address bit.
uint64_t large_page_reserved(unsigned shift) { return ((1ULL << shift) - 1) & ~0x1fffULL; }

// Why an entry stops a walk, shared by walk() and for_each_mapping() so the two
// agree on exactly which mappings exist.
enum class EntryCheck { Ok, NotPresent, ReservedAddress, ReservedPs, ReservedLarge };

EntryCheck check_entry(uint64_t e, unsigned level, uint64_t reserved_mask) {
  if ((e & kPresent) == 0) return EntryCheck::NotPresent;
  if ((e & reserved_mask) != 0) return EntryCheck::ReservedAddress;
  if ((e & kPageSizeBit) != 0 && level != kPt) {
    if (level <= kPml4) return EntryCheck::ReservedPs;
    if ((e & large_page_reserved(kLevelShift[level])) != 0) return EntryCheck::ReservedLarge;
  }
  return EntryCheck::Ok;
}

bool is_leaf(uint64_t e, unsigned level) { return level == kPt || (e & kPageSizeBit) != 0; }

[[gnu::cold]] Error entry_error(ErrorCode code, uint64_t vaddr, unsigned level,
                                uint64_t entry_addr, uint64_t entry, const std::string& why) {
  return Error(code, "vaddr " + hex(vaddr) + ": " + kLevelName[level] + " entry at " +
                         hex(entry_addr) + " = " + hex(entry) + " " + why);
}

[[gnu::cold]] Error check_error(EntryCheck c, uint64_t vaddr, unsigned level,
                                uint64_t entry_addr, uint64_t entry, unsigned max_phys_bits) {
  switch (c) {
    case EntryCheck::NotPresent:
      return entry_error(ErrorCode::NotPresent, vaddr, level, entry_addr, entry, "is not present");
    case EntryCheck::ReservedAddress:
      return entry_error(ErrorCode::ReservedBits, vaddr, level, entry_addr, entry,
                         "has address bits set at or above MAXPHYADDR " +
                             std::to_string(max_phys_bits));
    case EntryCheck::ReservedPs:
      return entry_error(ErrorCode::ReservedBits, vaddr, level, entry_addr, entry,
                         "has PS set, which is reserved at this level");
    case EntryCheck::ReservedLarge:
      return entry_error(ErrorCode::ReservedBits, vaddr, level, entry_addr, entry,
                         "maps a large page whose address is not aligned to its size");
    case EntryCheck::Ok:
      break;
  }
  return Error(ErrorCode::InvalidArgument, "check_error called on a valid entry");
}

}  // namespace

struct PageWalker::EnumState {
  uint64_t start;
  uint64_t end;
  const std::function<bool(const Translation&)>& fn;
  size_t max_tables;
  size_t tables_read = 0;
  std::array<uint64_t, 5> path{};
  unsigned depth = 0;
  bool stopped = false;
};

PageWalker::PageWalker(const GuestMemory& mem, PagingConfig cfg, size_t cache_entries)
    : mem_(mem), cfg_(cfg) {
  cfg_.max_phys_bits = std::clamp(cfg_.max_phys_bits, 12u, 52u);
  cfg_.root &= ~(kPageSize - 1);
  const uint64_t below_max = (1ULL << cfg_.max_phys_bits) - 1;
  addr_mask_ = kAddressBits & below_max;
  reserved_mask_ = kAddressBits & ~below_max;
  size_t n = 1;
  while (n < cache_entries && n < (size_t{1} << 22)) n <<= 1;
  cache_mask_ = n - 1;
  cache_.resize(3 * n);
  flush_cache();
}

bool PageWalker::is_canonical(uint64_t vaddr, PagingMode mode) {
  return sign_extend(vaddr, va_bits(mode)) == vaddr;
}

uint64_t PageWalker::root_from_cr3(uint64_t cr3, [[maybe_unused]] uint64_t cr4,
                                   unsigned max_phys_bits) {
  // CR4.PCIDE (bit 17) only changes what bits 11:0 and 63 mean, never that
  // they are outside the 4 KiB-aligned table address, so the mask is the same.
  max_phys_bits = std::clamp(max_phys_bits, 12u, 52u);
  const uint64_t below_max = (1ULL << max_phys_bits) - 1;
  return cr3 & kAddressBits & below_max;
}

PagingMode PageWalker::mode_from_cr4(uint64_t cr4) {
  return (cr4 & (1ULL << 12)) != 0 ? PagingMode::Level5 : PagingMode::Level4;
}

Result<Translation> PageWalker::walk(uint64_t vaddr) const {
  if (!is_canonical(vaddr, cfg_.mode)) {
    return Error(ErrorCode::NonCanonical,
                 "vaddr " + hex(vaddr) + " is not canonical for " +
                     (cfg_.mode == PagingMode::Level5 ? "5-level" : "4-level") + " paging");
  }
  const PhysMap& map = mem_.phys_map();
  std::array<uint64_t, 5> path{};
  unsigned depth = 0;
  uint64_t table = cfg_.root;
  bool writable = true, user = true, executable = true;
  // Bounded: the PT level is always a leaf.
  for (unsigned level = first_level(cfg_.mode); level <= kPt; ++level) {
    const unsigned shift = kLevelShift[level];
    const uint64_t entry_addr = table + ((vaddr >> shift) & (kEntries - 1)) * 8;
    if (!map.contains(table, kPageSize)) {
      return Error(ErrorCode::OutOfRange, "vaddr " + hex(vaddr) + ": " + kLevelName[level] +
                                              " table at " + hex(table) +
                                              " is not guest RAM");
    }
    uint64_t e = 0;
    if (Status st = mem_.read(entry_addr, &e, sizeof e); !st) {
      return st.error().with_context("vaddr " + hex(vaddr) + ": reading " + kLevelName[level] +
                                     " entry at " + hex(entry_addr));
    }
    if (EntryCheck c = check_entry(e, level, reserved_mask_); c != EntryCheck::Ok) {
      return check_error(c, vaddr, level, entry_addr, e, cfg_.max_phys_bits);
    }
    writable = writable && (e & kWritable) != 0;
    user = user && (e & kUser) != 0;
    executable = executable && (e & kNoExecute) == 0;
    if (is_leaf(e, level)) {
      const uint64_t size = 1ULL << shift;
      Translation t;
      t.virt_page = vaddr & ~(size - 1);
      t.phys_page = e & addr_mask_ & ~(size - 1);
      t.page_size = size;
      t.writable = writable;
      t.user = user;
      t.executable = executable;
      if (!map.contains(t.phys_page, size)) {
        return entry_error(ErrorCode::OutOfRange, vaddr, level, entry_addr, e,
                           "maps page " + hex(t.phys_page) + " (+" + hex(size) +
                               ") which is not wholly guest RAM");
      }
      return t;
    }
    path[depth++] = table;
    table = e & addr_mask_;
    // Real kernels never point back up the path; a guest that does would make
    // the walk reinterpret a table as another level.
    if (std::find(path.begin(), path.begin() + depth, table) != path.begin() + depth) {
      return entry_error(ErrorCode::Cycle, vaddr, level, entry_addr, e,
                         "points at table " + hex(table) + " already on this walk");
    }
  }
  return Error(ErrorCode::InvalidArgument, "vaddr " + hex(vaddr) + ": walk ran past the PT level");
}

Result<Translation> PageWalker::translate(uint64_t vaddr) {
  for (size_t bank = 0; bank < kBankShift.size(); ++bank) {
    const unsigned shift = kBankShift[bank];
    const CacheEntry& c = cache_[bank * (cache_mask_ + 1) + ((vaddr >> shift) & cache_mask_)];
    const uint64_t size = 1ULL << shift;
    if (c.virt_page == (vaddr & ~(size - 1))) {
      ++hits_;
      Translation t;
      t.virt_page = c.virt_page;
      t.phys_page = c.phys_flags & ~(kPageSize - 1);
      t.page_size = size;
      t.writable = (c.phys_flags & kCacheWritable) != 0;
      t.user = (c.phys_flags & kCacheUser) != 0;
      t.executable = (c.phys_flags & kCacheExecutable) != 0;
      return t;
    }
  }
  ++misses_;
  Result<Translation> r = walk(vaddr);
  if (r) {
    const Translation& t = *r;
    const size_t bank = t.page_size == (1ULL << 12) ? 0 : t.page_size == (1ULL << 21) ? 1 : 2;
    CacheEntry& c = cache_[bank * (cache_mask_ + 1) + ((vaddr >> kBankShift[bank]) & cache_mask_)];
    c.virt_page = t.virt_page;
    c.phys_flags = t.phys_page | (t.writable ? kCacheWritable : 0) | (t.user ? kCacheUser : 0) |
                   (t.executable ? kCacheExecutable : 0);
  }
  return r;
}

Result<uint64_t> PageWalker::virt_to_phys(uint64_t vaddr) {
  KT_ASSIGN_OR_RETURN(Translation t, translate(vaddr));
  return t.phys(vaddr);
}

Status PageWalker::read_virtual(uint64_t vaddr, void* out, size_t len) {
  if (len == 0) return ok_status();
  if (len - 1 > ~vaddr) {
    return Error(ErrorCode::OutOfRange, "virtual read of " + std::to_string(len) + " bytes at " +
                                            hex(vaddr) + " wraps past the top of the address space");
  }
  auto* dst = static_cast<uint8_t*>(out);
  uint64_t at = vaddr;
  size_t left = len;
  while (left > 0) {
    Result<Translation> t = translate(at);
    if (!t) {
      return t.error().with_context("virtual read of " + std::to_string(len) + " bytes at " +
                                    hex(vaddr));
    }
    const uint64_t in_page = t->page_size - (at - t->virt_page);
    const size_t n = in_page < left ? static_cast<size_t>(in_page) : left;
    KT_TRY(mem_.read(t->phys(at), dst, n));
    dst += n;
    at += n;
    left -= n;
  }
  return ok_status();
}

void PageWalker::flush_cache() {
  for (CacheEntry& c : cache_) c = CacheEntry{kEmptyTag, 0};
}

void PageWalker::set_root(uint64_t root) {
  cfg_.root = root & ~(kPageSize - 1);
  flush_cache();
}

Status PageWalker::for_each_mapping(uint64_t start, uint64_t end,
                                    const std::function<bool(const Translation&)>& fn,
                                    size_t max_tables) const {
  if (start >= end) return ok_status();
  EnumState st{start, end, fn, max_tables};
  if (!mem_.phys_map().contains(cfg_.root, kPageSize)) return ok_status();
  return visit_table(st, first_level(cfg_.mode), cfg_.root, 0, true, true, true);
}

Status PageWalker::visit_table(EnumState& st, unsigned level, uint64_t table, uint64_t vprefix,
                               bool writable, bool user, bool executable) const {
  if (st.tables_read >= st.max_tables) {
    return Error(ErrorCode::LimitExceeded,
                 "page-table enumeration read " + std::to_string(st.tables_read) +
                     " tables, the limit; next was the " + kLevelName[level] + " table at " +
                     hex(table));
  }
  ++st.tables_read;
  std::array<uint64_t, kEntries> entries;
  if (Status s = mem_.read(table, entries.data(), sizeof entries); !s) {
    // The map said RAM but the backend disagrees (e.g. a short buffer): walk()
    // fails on these entries too, so they are not mappings.
    if (s.error().code == ErrorCode::OutOfRange) return ok_status();
    return s.error().with_context("reading " + std::string(kLevelName[level]) + " table at " +
                                  hex(table));
  }

  const PhysMap& map = mem_.phys_map();
  const unsigned shift = kLevelShift[level];
  const uint64_t span = 1ULL << shift;
  const unsigned bits = va_bits(cfg_.mode);
  st.path[st.depth++] = table;
  for (unsigned i = 0; i < kEntries && !st.stopped; ++i) {
    // Index order is address order: in the top table the upper half starts at
    // index 256 and sign-extends to the highest addresses.
    const uint64_t vbase = sign_extend(vprefix | (uint64_t{i} << shift), bits);
    const uint64_t vlast = vbase + (span - 1);
    if (vlast < st.start) continue;
    if (vbase >= st.end) break;
    const uint64_t e = entries[i];
    if (check_entry(e, level, reserved_mask_) != EntryCheck::Ok) continue;
    const bool w = writable && (e & kWritable) != 0;
    const bool u = user && (e & kUser) != 0;
    const bool x = executable && (e & kNoExecute) == 0;
    if (is_leaf(e, level)) {
      Translation t;
      t.virt_page = vbase;
      t.phys_page = e & addr_mask_ & ~(span - 1);
      t.page_size = span;
      t.writable = w;
      t.user = u;
      t.executable = x;
      if (!map.contains(t.phys_page, span)) continue;
      if (!st.fn(t)) st.stopped = true;
      continue;
    }
    const uint64_t next = e & addr_mask_;
    const auto path_end = st.path.begin() + st.depth;
    if (std::find(st.path.begin(), path_end, next) != path_end) continue;
    if (!map.contains(next, kPageSize)) continue;
    Status s = visit_table(st, level + 1, next, vbase & ((1ULL << bits) - 1), w, u, x);
    if (!s) {
      --st.depth;
      return s;
    }
  }
  --st.depth;
  return ok_status();
}

}  // namespace kt
