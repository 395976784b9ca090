// Decode benchmark: one large synthetic trace (libipt's encoder over
// generated loop-and-call code), decoded instructions per second for
//   libipt's instruction decoder, one thread (the baseline),
//   kthost's decoder (block decoder, caches, profile), one thread,
//   kthost's decoder on every core,
// with the ratios. Targets: one thread >= 3x the baseline, two cores >= 1.7x one.
//   bench_decode [--insns MILLIONS] [--cpus N] [--threads N] [--write-bundle DIR]
// --write-bundle also writes the trace as a bundle (for kthost report/diff).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "../unit/synthetic_pt.h"
#include "kthost/bundle/bundle.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/image.h"
#include "kthost/decode/symbolizer.h"

namespace {

using kt::test::SimInsn;
using kt::test::SimProgram;
constexpr uint64_t kBase = 0xffffffff81000000ull;
constexpr int kFunctions = 64;

struct Code {
  std::vector<uint8_t> bytes;
  SimProgram prog;
  std::string kallsyms;
  uint64_t driver = 0;
};

// 64 leaf functions, each a counted loop over a few NOPs of mixed lengths,
// and a driver that calls each of them once.
Code generate() {
  Code c;
  c.bytes.assign(0x10000, 0xcc);
  static const std::vector<std::vector<uint8_t>> nops = {
      {0x90}, {0x66, 0x90}, {0x0f, 0x1f, 0x00}, {0x0f, 0x1f, 0x40, 0x00}};
  auto put = [&](uint64_t off, std::vector<uint8_t> b, SimInsn in) {
    std::copy(b.begin(), b.end(), c.bytes.begin() + static_cast<long>(off));
    in.len = static_cast<uint8_t>(b.size());
    c.prog[kBase + off] = in;
    return off + b.size();
  };
  char line[128];
  for (int i = 0; i < kFunctions; ++i) {
    uint64_t off = static_cast<uint64_t>(i) * 0x100;
    std::snprintf(line, sizeof line, "%016llx T leaf_%02d\n", static_cast<unsigned long long>(kBase + off), i);
    c.kallsyms += line;
    uint8_t loops = static_cast<uint8_t>(4 + i % 8);
    off = put(off, {0xb9, loops, 0, 0, 0}, {});  // mov ecx, loops
    uint64_t loop = off;
    for (int k = 0; k < 3 + i % 5; ++k) off = put(off, nops[(i + k) % 4], {});
    off = put(off, {0xff, 0xc9}, {});  // dec ecx
    int8_t rel = static_cast<int8_t>(static_cast<int64_t>(loop) - static_cast<int64_t>(off + 2));
    off = put(off, {0x75, static_cast<uint8_t>(rel)}, {2, SimInsn::Jcc, kBase + loop});
    put(off, {0xc3}, {1, SimInsn::Ret, 0});
  }
  uint64_t off = 0x8000;
  c.driver = kBase + off;
  c.kallsyms += "ffffffff81008000 T driver\nffffffff81009000 T driver_end\n";
  for (int i = 0; i < kFunctions; ++i) {
    int32_t rel = static_cast<int32_t>(static_cast<int64_t>(i) * 0x100 - static_cast<int64_t>(off + 5));
    uint8_t r[4];
    std::memcpy(r, &rel, 4);
    off = put(off, {0xe8, r[0], r[1], r[2], r[3]}, {5, SimInsn::Call, kBase + static_cast<uint64_t>(i) * 0x100});
  }
  put(off, {0xc3}, {1, SimInsn::Ret, 0});
  return c;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU seconds of the whole process: on a shared machine the parallel
// speedup is bounded by the cores others leave free, so the benchmark also
// shows whether the parallel decode costs more CPU than the sequential one.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string load_average() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  char buf[64] = "?";
  if (f) {
    if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
    std::fclose(f);
  }
  std::string s(buf);
  return s.substr(0, s.find(' '));
}

}  // namespace

int main(int argc, char** argv) {
  double million_insns = 100;
  unsigned cpus = 2, threads = std::max(1u, std::thread::hardware_concurrency());
  std::string bundle_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--insns")) million_insns = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--cpus")) cpus = static_cast<unsigned>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--threads")) threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--write-bundle")) bundle_dir = argv[i + 1];
  }
  Code code = generate();
  // One driver run's packets, repeated; a PSB+ every 4 runs (about 3 KiB).
  kt::test::PtWriter one(1 << 20);
  auto decide = [state = std::make_shared<std::map<uint64_t, int>>()](uint64_t ip) {
    // Each loop's jnz is taken (loops-1) times, then falls through.
    auto& n = (*state)[ip];
    uint64_t fn = (ip - kBase) / 0x100;
    int total = 4 + static_cast<int>(fn % 8);
    bool taken = ++n < total;
    if (!taken) n = 0;
    return taken;
  };
  uint64_t per_run = kt::test::walk(one, code.prog, code.driver, decide);
  std::vector<uint8_t> run_bytes = one.finish();
  uint64_t runs = static_cast<uint64_t>(million_insns * 1e6 / static_cast<double>(cpus) / static_cast<double>(per_run)) + 1;
  kt::PtStreams pt;
  for (uint32_t cpu = 0; cpu < cpus; ++cpu) {
    kt::test::PtWriter w(runs * run_bytes.size() + runs * 64 + 4096);
    for (uint64_t r = 0; r < runs; ++r) {
      if (r % 4 == 0) w.psb(1000 + r);
      w.raw(run_bytes);
    }
    pt[cpu] = w.finish();
  }
  uint64_t expected = per_run * runs * cpus, pt_bytes = 0;
  for (const auto& [c, d] : pt) pt_bytes += d.size();
  std::printf("trace: %u CPUs, %.1f M instructions, %.1f MiB of PT (%llu instructions per run, PSB every 4 runs)\n",
              cpus, static_cast<double>(expected) / 1e6, static_cast<double>(pt_bytes) / (1 << 20),
              static_cast<unsigned long long>(per_run));

  if (!bundle_dir.empty()) {
    std::vector<uint32_t> cpu_list;
    for (const auto& [c, d] : pt) cpu_list.push_back(c);
    auto w = kt::BundleWriter::create(bundle_dir, cpu_list, kt::BundleClock{});
    if (!w) return std::fprintf(stderr, "%s\n", w.error().message.c_str()), 2;
    kt::TextRecord r;
    r.source = kt::TextSource::Snapshot;
    r.start = kBase;
    r.bytes = code.bytes;
    bool ok = (*w)->append_text(r).ok() && (*w)->write_whole_file("kallsyms", code.kallsyms).ok();
    for (const auto& [c, d] : pt) ok = ok && (*w)->append_pt(c, d.data(), d.size()).ok();
    if (!ok || !(*w)->close()) return std::fprintf(stderr, "writing %s failed\n", bundle_dir.c_str()), 2;
    std::printf("wrote bundle %s\n", bundle_dir.c_str());
  }

  kt::VersionedImage image;
  image.add_mapping(kBase, code.bytes, 0, kt::kTimeForever, "bench");
  if (auto st = image.finalize(); !st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 2;
  }
  kt::Symbolizer symbols;
  if (!symbols.add_kallsyms(code.kallsyms, "")) return 2;
  symbols.finalize();

  double t0 = now();
  uint64_t base_insns = 0;
  for (const auto& [c, d] : pt) {
    auto n = kt::count_insns_baseline(d, image);
    if (!n) return 2;
    base_insns += *n;
  }
  double base_s = now() - t0;
  double one_cpu = 0, all_cpu = 0;
  auto ours = [&](unsigned n) -> std::pair<double, uint64_t> {
    kt::DecodeOptions o;
    o.threads = n;
    o.check_stack_edges = false;  // the decode alone, as the baselines
    double c = cpu_seconds();
    double s = now();
    auto p = kt::decode_profile(pt, image, symbols, o);
    if (!p) {
      std::fprintf(stderr, "%s\n", p.error().message.c_str());
      std::exit(2);
    }
    (n == 1 ? one_cpu : all_cpu) = cpu_seconds() - c;
    return {now() - s, p->insns};
  };
  auto [one_s, one_insns] = ours(1);
  auto [all_s, all_insns] = ours(threads);
  double base_rate = static_cast<double>(base_insns) / base_s, one_rate = static_cast<double>(one_insns) / one_s,
         all_rate = static_cast<double>(all_insns) / all_s;
  std::printf("libipt instruction decoder, 1 thread: %8.1f M insns/s  (%.2f s, %llu instructions)\n", base_rate / 1e6,
              base_s, static_cast<unsigned long long>(base_insns));
  std::printf("kthost decoder, 1 thread:             %8.1f M insns/s  (%.2f s, %llu instructions)  %.2fx baseline (target 3x)\n",
              one_rate / 1e6, one_s, static_cast<unsigned long long>(one_insns), one_rate / base_rate);
  std::printf("kthost decoder, %u threads:            %8.1f M insns/s  (%.2f s, %llu instructions)  %.2fx one thread (target 1.7x on 2 cores)\n",
              threads, all_rate / 1e6, all_s, static_cast<unsigned long long>(all_insns), all_rate / one_rate);
  std::printf("CPU time: 1 thread %.2f s, %u threads %.2f s (%.2fx: parallel overhead; load average now %s)\n", one_cpu,
              threads, all_cpu, all_cpu / one_cpu, load_average().c_str());
  bool exact = base_insns == expected && one_insns == expected && all_insns == expected;
  std::printf("instruction counts %s the generated %llu\n", exact ? "all equal" : "DIFFER from",
              static_cast<unsigned long long>(expected));
  return exact ? 0 : 1;
}
