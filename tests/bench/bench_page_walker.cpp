// Page-walker throughput against BufferMemory, with a raw 8-byte guest read as
// the baseline measured in the same run (so ratios survive a slow machine).
//
// Table set, kernel-like, in 64 MiB of RAM:
//   0xffffffffc0000000 + 32 MiB  module area, 4 KiB pages (8192 PTEs, 16 PTs)
//   0xffffffff81000000 + 32 MiB  kernel text, 2 MiB pages
//   0xffff888000000000 + 64 MiB  direct map, 2 MiB pages
// Usage: bench_page_walker [--json]
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kthost/introspect/page_walker.h"

namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kRam = 64 * kMiB;
constexpr uint64_t kTablesBase = 1 * kMiB;
constexpr uint64_t kModules = 0xffff'ffff'c000'0000ULL;
constexpr uint64_t kText = 0xffff'ffff'8100'0000ULL;
constexpr uint64_t kDirect = 0xffff'8880'0000'0000ULL;
constexpr double kCachedTarget = 20e6;
constexpr double kColdTarget = 2e6;
constexpr double kSecondsPerPhase = 1.5;

volatile uint64_t g_sink;  // keeps results observable so loops are not elided

class Tables {
 public:
  Tables() : mem_(kRam), next_(kTablesBase) { root_ = alloc(); }
  kt::BufferMemory& mem() { return mem_; }
  uint64_t root() const { return root_; }
  uint64_t tables_begin() const { return kTablesBase; }
  uint64_t tables_end() const { return next_; }

  void map(uint64_t va, uint64_t pa, uint64_t size, uint64_t flags) {
    const unsigned leaf_shift = size == 4096 ? 12 : 21;
    uint64_t table = root_;
    for (unsigned shift = 39; shift > leaf_shift; shift -= 9) {
      const uint64_t at = table + ((va >> shift) & 511) * 8;
      uint64_t e = 0;
      (void)mem_.read(at, &e, 8);
      if ((e & 1) == 0) {
        e = alloc() | 0x3;  // P | RW
        mem_.write_u64(at, e);
      }
      table = e & 0x000f'ffff'ffff'f000ULL;
    }
    const uint64_t ps = leaf_shift == 12 ? 0 : 0x80;
    mem_.write_u64(table + ((va >> leaf_shift) & 511) * 8, pa | flags | ps | 1);
  }

 private:
  uint64_t alloc() {
    const uint64_t t = next_;
    next_ += 4096;
    return t;
  }
  kt::BufferMemory mem_;
  uint64_t next_;
  uint64_t root_ = 0;
};

// Runs `body(i)` in batches until kSecondsPerPhase passes; returns ops/s.
template <typename Body>
double measure(Body body) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  uint64_t ops = 0;
  double elapsed = 0;
  do {
    for (uint64_t i = 0; i < 65536; ++i) body(ops + i);
    ops += 65536;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < kSecondsPerPhase);
  return static_cast<double>(ops) / elapsed;
}

// A fixed pseudo-random visiting order, so consecutive addresses do not share
// cache lines or table entries.
std::vector<uint64_t> scatter(uint64_t base, uint64_t pages, uint64_t page_size, size_t n) {
  std::vector<uint64_t> out(n);
  uint64_t x = 0x9e37'79b9'7f4a'7c15ULL;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = base + (x % pages) * page_size + ((x >> 32) % (page_size / 8)) * 8;
  }
  return out;
}

const char* verdict(double rate, double target) { return rate >= target ? "PASS" : "MISS"; }

}  // namespace

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  if (argc > 1 && !json) {
    std::fprintf(stderr, "usage: %s [--json]\n", argv[0]);
    return 2;
  }

  Tables t;
  for (uint64_t off = 0; off < 32 * kMiB; off += 4096) t.map(kModules + off, 16 * kMiB + off, 4096, 0x2);
  for (uint64_t off = 0; off < 32 * kMiB; off += 2 * kMiB) t.map(kText + off, 16 * kMiB + off, 2 * kMiB, 0);
  for (uint64_t off = 0; off < kRam; off += 2 * kMiB) t.map(kDirect + off, off, 2 * kMiB, 0x2);

  kt::PageWalker walker(t.mem(), {kt::PagingMode::Level4, t.root()});
  constexpr size_t kMask = (1u << 16) - 1;

  // Cold: distinct pages across all three areas, mostly 4 KiB (the deepest walk).
  std::vector<uint64_t> cold = scatter(kModules, 8192, 4096, kMask + 1);
  std::vector<uint64_t> cold_2m = scatter(kDirect, 32, 2 * kMiB, kMask + 1);
  for (size_t i = 0; i < cold.size(); i += 4) cold[i] = cold_2m[i];
  for (uint64_t va : cold) {
    if (!walker.walk(va).ok()) {
      std::fprintf(stderr, "bench setup: %s\n", walker.walk(va).error().message.c_str());
      return 1;
    }
  }
  // Working set for the cache: 2048 module pages plus the 16 text pages.
  std::vector<uint64_t> warm = scatter(kModules, 2048, 4096, kMask + 1);
  std::vector<uint64_t> warm_text = scatter(kText, 16, 2 * kMiB, kMask + 1);
  for (size_t i = 0; i < warm.size(); i += 8) warm[i] = warm_text[i];
  // Baseline: 8-byte reads scattered over the page tables, the bytes a walk
  // reads. They stay in the CPU caches as the walks' do, so the ratio measures
  // walker overhead, not DRAM latency.
  const uint64_t table_pages = (t.tables_end() - t.tables_begin()) / 4096;
  std::vector<uint64_t> phys = scatter(t.tables_begin(), table_pages, 4096, kMask + 1);

  const double read_rate = measure([&](uint64_t i) {
    uint64_t v = 0;
    (void)t.mem().read(phys[i & kMask], &v, sizeof v);
    g_sink = g_sink + v;
  });
  const double cold_rate = measure([&](uint64_t i) {
    kt::Result<kt::Translation> r = walker.walk(cold[i & kMask]);
    g_sink = g_sink + r->phys_page;
  });
  walker.flush_cache();
  const double cached_rate = measure([&](uint64_t i) {
    kt::Result<kt::Translation> r = walker.translate(warm[i & kMask]);
    g_sink = g_sink + r->phys_page;
  });
  const kt::PageWalker::CacheStats stats = walker.cache_stats();
  const double hit_rate =
      static_cast<double>(stats.hits) / static_cast<double>(stats.hits + stats.misses);

  if (json) {
    std::printf(
        "{\"read8_per_s\": %.0f, \"cold_walks_per_s\": %.0f, \"cached_translations_per_s\": %.0f, "
        "\"cold_vs_read8\": %.4f, \"cached_vs_read8\": %.4f, \"cache_hit_rate\": %.6f, "
        "\"cold_target\": %.0f, \"cached_target\": %.0f, \"cold_pass\": %s, \"cached_pass\": %s}\n",
        read_rate, cold_rate, cached_rate, cold_rate / read_rate, cached_rate / read_rate, hit_rate,
        kColdTarget, kCachedTarget, cold_rate >= kColdTarget ? "true" : "false",
        cached_rate >= kCachedTarget ? "true" : "false");
  } else {
    std::printf("baseline  8-byte BufferMemory::read  %8.2f M/s\n", read_rate / 1e6);
    std::printf("cold      PageWalker::walk            %8.2f M/s  (%.3fx read)  target >= %.0f M/s  %s\n",
                cold_rate / 1e6, cold_rate / read_rate, kColdTarget / 1e6,
                verdict(cold_rate, kColdTarget));
    std::printf("cached    PageWalker::translate       %8.2f M/s  (%.3fx read)  target >= %.0f M/s  %s\n",
                cached_rate / 1e6, cached_rate / read_rate, kCachedTarget / 1e6,
                verdict(cached_rate, kCachedTarget));
    std::printf("cache hit rate %.4f%% (%" PRIu64 " hits, %" PRIu64 " misses)\n", hit_rate * 100,
                stats.hits, stats.misses);
  }
  return 0;
}
