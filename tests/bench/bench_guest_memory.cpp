// Benchmark: reading guest kernel text from a running guest.
//
//   bench_guest_memory --vm vm.json [--json]
//
// One run prints: cold page walks/s and cached translations/s on the guest's
// real page tables, text snapshot throughput for each backend (mmap first
// touch, mmap mapped, process memory), and QMP `xp` as the baseline, with the
// ratio of each backend against it. Targets are printed, never asserted.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kthost/common/strings.h"
#include "kthost/introspect/backends.h"
#include "kthost/introspect/kernel_layout.h"
#include "kthost/vm/qmp_client.h"

using namespace kt;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void die(const Error& e) {
  std::fprintf(stderr, "bench_guest_memory: %s\n", e.message.c_str());
  std::exit(1);
}

// Reads every range of the layout through `mem`; returns MB/s.
double snapshot_rate(const GuestMemory& mem, const KernelLayout& layout, uint64_t* bytes_out) {
  PageWalker walker(mem, layout.paging);
  std::vector<uint8_t> chunk(1u << 20);
  uint64_t bytes = 0;
  auto t = Clock::now();
  for (const auto& r : layout.ranges)
    for (uint64_t at = r.start; at < r.end; at += chunk.size()) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), r.end - at));
      if (auto st = walker.read_virtual(at, chunk.data(), n); !st) die(st.error());
      bytes += n;
    }
  *bytes_out = bytes;
  return static_cast<double>(bytes) / seconds_since(t) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::string vm_path;
  bool json_out = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--vm") && i + 1 < argc) vm_path = argv[++i];
    else if (!std::strcmp(argv[i], "--json")) json_out = true;
  }
  if (vm_path.empty()) {
    std::fprintf(stderr, "usage: bench_guest_memory --vm vm.json [--json]\n");
    return 2;
  }
  auto vm = VmDescription::load(vm_path);
  if (!vm) die(vm.error());
  auto qmp = QmpClient::connect(vm->qmp);
  if (!qmp) die(qmp.error());
  auto regs = read_registers(*qmp, 0);
  if (!regs) die(regs.error());
  // Fresh mappings so the first pass really is the first touch in this process.
  auto mmap_mem = open_guest_memory(*qmp, *vm, BackendChoice::Mmap);
  if (!mmap_mem) die(mmap_mem.error());
  auto layout = discover_kernel_layout(**mmap_mem, *regs, GuestSymbols{});
  if (!layout) die(layout.error());
  // Discovery touched the tables, not the text: the first snapshot is cold.
  uint64_t bytes = 0;
  double mmap_cold = snapshot_rate(**mmap_mem, *layout, &bytes);
  double mmap_warm = 0;
  for (int i = 0; i < 5; ++i) mmap_warm = std::max(mmap_warm, snapshot_rate(**mmap_mem, *layout, &bytes));
  auto proc_mem = open_guest_memory(*qmp, *vm, BackendChoice::Process);
  if (!proc_mem) die(proc_mem.error());
  double proc = 0;
  for (int i = 0; i < 3; ++i) proc = std::max(proc, snapshot_rate(**proc_mem, *layout, &bytes));

  // Baseline: QMP xp on a 256 KiB slice of the kernel text (all of it would take minutes).
  auto xp_mem = open_guest_memory(*qmp, *vm, BackendChoice::Monitor);
  if (!xp_mem) die(xp_mem.error());
  PageWalker xp_walker(**xp_mem, layout->paging);
  std::vector<uint8_t> slice(256 * 1024);
  auto t = Clock::now();
  if (auto st = xp_walker.read_virtual(layout->text_start, slice.data(), slice.size()); !st) die(st.error());
  double xp = static_cast<double>(slice.size()) / seconds_since(t) / 1e6;

  // Page walks over the guest's own tables (mmap backend).
  PageWalker walker(**mmap_mem, layout->paging, 4096);
  std::vector<uint64_t> pages;
  for (const auto& r : layout->ranges)
    for (uint64_t a = r.start; a < r.end; a += 4096) pages.push_back(a);
  uint64_t sink = 0, walks = 0;
  t = Clock::now();
  while (seconds_since(t) < 1.0)
    for (uint64_t a : pages) {
      auto tr = walker.walk(a);
      sink += tr ? tr->phys_page : 1;
      ++walks;
    }
  double cold = static_cast<double>(walks) / seconds_since(t);
  std::vector<uint64_t> hot(pages.begin(), pages.begin() + std::min<size_t>(pages.size(), 2048));
  for (uint64_t a : hot) (void)walker.translate(a);
  uint64_t lookups = 0;
  t = Clock::now();
  while (seconds_since(t) < 1.0) {
    for (int rep = 0; rep < 64; ++rep)
      for (uint64_t a : hot) {
        auto tr = walker.translate(a + 8);
        sink += tr ? tr->phys_page : 1;
      }
    lookups += 64 * hot.size();
  }
  double cached = static_cast<double>(lookups) / seconds_since(t);
  if (sink == 42) std::printf(" ");

  if (json_out) {
    nlohmann::json doc = {{"text_bytes", bytes},          {"cold_walks_per_s", cold},
                          {"cached_translations_per_s", cached}, {"mmap_first_touch_MBps", mmap_cold},
                          {"mmap_MBps", mmap_warm},       {"process_MBps", proc},
                          {"xp_MBps", xp},                {"mmap_vs_xp", mmap_warm / xp},
                          {"process_vs_xp", proc / xp}};
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  auto verdict = [](bool ok) { return ok ? "MET" : "MISSED"; };
  std::printf("guest kernel text: %s in %zu ranges (%s, %s paging)\n", human_bytes(bytes).c_str(),
              layout->ranges.size(), vm->accel.c_str(), layout->paging.mode == PagingMode::Level5 ? "5-level" : "4-level");
  std::printf("%-34s %14s %12s %s\n", "measure", "value", "vs xp", "target");
  std::printf("%-34s %11.2f M/s %12s %s (>= 2 M/s)\n", "cold page walks (guest tables)", cold / 1e6, "", verdict(cold >= 2e6));
  std::printf("%-34s %11.2f M/s %12s %s (>= 20 M/s)\n", "cached translations", cached / 1e6, "", verdict(cached >= 20e6));
  std::printf("%-34s %10.1f MB/s %11.0fx\n", "snapshot, mmap first touch", mmap_cold, mmap_cold / xp);
  std::printf("%-34s %10.1f MB/s %11.0fx %s (>= 1000 MB/s, >= 1000x xp)\n", "snapshot, mmap (mapped)", mmap_warm,
              mmap_warm / xp, verdict(mmap_warm >= 1000 && mmap_warm / xp >= 1000));
  std::printf("%-34s %10.1f MB/s %11.0fx\n", "snapshot, QEMU process memory", proc, proc / xp);
  std::printf("%-34s %10.3f MB/s %11.0fx (baseline)\n", "QMP xp (256 KiB)", xp, 1.0);
  return 0;
}
