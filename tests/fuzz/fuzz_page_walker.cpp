// libFuzzer target: PageWalker over 64 KiB of guest-chosen "RAM" holding the
// page tables. Besides "no crash, no sanitizer report", it checks the walker's
// promises: cached and uncached walks agree, and every mapping that
// for_each_mapping reports is one walk() accepts, with the same result.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kthost/introspect/page_walker.h"

namespace {

constexpr size_t kRam = 64 * 1024;
constexpr size_t kHeader = 32;

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool same(const kt::Translation& a, const kt::Translation& b) {
  return a.virt_page == b.virt_page && a.phys_page == b.phys_page && a.page_size == b.page_size &&
         a.writable == b.writable && a.user == b.user && a.executable == b.executable;
}

// A successful translation must describe an aligned, canonical page that is RAM.
void check_translation(const kt::Translation& t, uint64_t vaddr, const kt::PageWalker& w,
                       const kt::GuestMemory& mem) {
  check(t.page_size == 4096 || t.page_size == (1u << 21) || t.page_size == (1u << 30));
  check((t.virt_page & (t.page_size - 1)) == 0 && (t.phys_page & (t.page_size - 1)) == 0);
  check(vaddr - t.virt_page < t.page_size);
  check(kt::PageWalker::is_canonical(t.virt_page, w.config().mode));
  check(mem.phys_map().contains(t.phys_page, t.page_size));
}

// Layouts: flat 64 KiB; two regions with a hole (the backing is still 64 KiB);
// or a map claiming 2 GiB over the 64 KiB buffer, so large pages can be "RAM"
// while reads past the buffer fail.
kt::PhysMap make_map(unsigned kind) {
  switch (kind % 3) {
    case 1:
      return kt::PhysMap({{0, kRam / 2, 0}, {0x100000, kRam / 2, kRam / 2}});
    case 2:
      return kt::PhysMap({{0, 1ULL << 31, 0}});
    default:
      return kt::PhysMap({{0, kRam, 0}});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeader) return 0;
  const uint8_t flags = data[0];
  const unsigned max_phys_bits = 36u + data[1] % 17u;  // 36..52
  const uint64_t root_pick = load_u64(data + 2);
  const uint64_t vaddr = load_u64(data + 10);
  const uint64_t other = load_u64(data + 18);
  const size_t read_len = (static_cast<size_t>(data[26]) << 8 | data[27]) % 16384;

  std::vector<uint8_t> ram(kRam);
  std::memcpy(ram.data(), data + kHeader, std::min(size - kHeader, kRam));
  kt::BufferMemory mem(std::move(ram), make_map(flags >> 2));

  kt::PagingConfig cfg;
  cfg.mode = (flags & 1) ? kt::PagingMode::Level5 : kt::PagingMode::Level4;
  // Mostly a root inside the buffer; sometimes an arbitrary one.
  cfg.root = (flags & 2) ? root_pick : (root_pick % kRam);
  cfg.max_phys_bits = max_phys_bits;
  kt::PageWalker walker(mem, cfg, 1u + (data[28] & 31u));

  for (uint64_t va : {vaddr, other, vaddr ^ 0x1000, other + 0x200000}) {
    kt::Result<kt::Translation> uncached = walker.walk(va);
    kt::Result<kt::Translation> first = walker.translate(va);
    kt::Result<kt::Translation> second = walker.translate(va);
    check(uncached.ok() == first.ok() && first.ok() == second.ok());
    if (uncached.ok()) {
      check(same(*uncached, *first) && same(*first, *second));
      check_translation(*uncached, va, walker, mem);
      kt::Result<uint64_t> phys = walker.virt_to_phys(va);
      check(phys.ok() && *phys == uncached->phys(va));
    } else {
      check(uncached.error().code == first.error().code);
      check(!uncached.error().message.empty());
    }
  }

  std::vector<uint8_t> buf(read_len);
  (void)walker.read_virtual(vaddr, buf.data(), buf.size());

  uint64_t start = std::min(vaddr, other);
  uint64_t end = std::max(vaddr, other);
  if (flags & 0x80) {
    start = 0;
    end = ~0ULL;
  }
  size_t reported = 0;
  uint64_t last = 0;
  kt::Status st = walker.for_each_mapping(
      start, end,
      [&](const kt::Translation& t) {
        check(reported == 0 || t.virt_page > last);  // strictly ascending
        last = t.virt_page;
        kt::Result<kt::Translation> again = walker.walk(t.virt_page);
        check(again.ok() && same(*again, t));
        check_translation(t, t.virt_page, walker, mem);
        return ++reported < 4096;
      },
      4096);
  check(st.ok() || st.error().code == kt::ErrorCode::LimitExceeded);
  return 0;
}
