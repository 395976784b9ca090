// Sideband codec throughput: decode_frame + the matching parser over 64 MiB of
// frames in the mix a busy guest sends (90% TEXT_POKE with 5-byte old/new, the
// rest KSYMBOL, BPF_EVENT, HEARTBEAT). The baseline, measured in the same run,
// is a plain memcpy of the same buffer plus a sum over it, so the ratio says
// how far the codec is from just touching the bytes, whatever the machine.
// Usage: bench_ktproto [--json]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ktproto.h"

namespace {

constexpr size_t kBufferBytes = 64u << 20;
constexpr double kTargetFramesPerSecond = 1e6;
constexpr double kSecondsPerPhase = 2.0;

volatile uint64_t g_sink;  // keeps results observable so loops are not elided

struct Stream {
  std::vector<uint8_t> bytes;
  uint64_t frames = 0;
};

// Deterministic mix, so runs compare: every 10th frame is one of the others.
Stream build_stream() {
  Stream s;
  s.bytes.resize(kBufferBytes);
  const uint8_t nop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
  uint8_t call5[5] = {0xe8, 0, 0, 0, 0};
  size_t at = 0;
  for (uint64_t i = 0;; i++) {
    uint8_t* out = s.bytes.data() + at;
    const size_t cap = s.bytes.size() - at;
    long n = 0;
    const uint64_t time = 1'000'000'000ULL + i * 997;
    const uint32_t cpu = static_cast<uint32_t>(i % 16);
    switch (i % 30) {
      case 9: {
        const ktp_ksymbol m{time, cpu, 0xffffffffa0000000ULL + i * 64, 512, 1, 0, {"bpf_prog_6deef7357e7b4530_F", 27}};
        n = ktp_encode_ksymbol(out, cap, i, &m);
        break;
      }
      case 19: {
        const ktp_bpf_event m{time, cpu, 1, 0, static_cast<uint32_t>(i), {1, 2, 3, 4, 5, 6, 7, 8}};
        n = ktp_encode_bpf_event(out, cap, i, &m);
        break;
      }
      case 29: {
        const ktp_heartbeat m{time, i, i * 3, i * 2, 0, 0};
        n = ktp_encode_heartbeat(out, cap, i, &m);
        break;
      }
      default: {
        std::memcpy(call5 + 1, &i, 4);
        const ktp_text_poke m{time, cpu, 0xffffffff81000000ULL + (i % 65536) * 16, 5, nop5, 5, call5};
        n = ktp_encode_text_poke(out, cap, i, &m);
        break;
      }
    }
    if (n == KTP_ERR_SPACE) break;
    if (n < 0) {
      std::fprintf(stderr, "bench setup: encode: %s\n", ktp_status_name(static_cast<int>(n)));
      std::exit(1);
    }
    at += static_cast<size_t>(n);
    s.frames++;
  }
  s.bytes.resize(at);
  return s;
}

// One pass of the receiver's loop; returns the number of frames parsed.
uint64_t decode_all(const std::vector<uint8_t>& bytes) {
  uint64_t frames = 0, sum = 0;
  size_t at = 0;
  while (at < bytes.size()) {
    ktp_frame f{};
    size_t consumed = 0;
    const int st = ktp_decode_frame(bytes.data() + at, bytes.size() - at, &f, &consumed);
    if (st != KTP_OK) {
      std::fprintf(stderr, "bench: decode at %zu: %s\n", at, ktp_status_name(st));
      std::exit(1);
    }
    at += consumed;
    int pst = KTP_ERR_TYPE;
    switch (f.type) {
      case KTP_TEXT_POKE: {
        ktp_text_poke m{};
        if ((pst = ktp_parse_text_poke(&f, &m)) == KTP_OK) sum += m.addr + m.new_bytes[1];
        break;
      }
      case KTP_KSYMBOL: {
        ktp_ksymbol m{};
        if ((pst = ktp_parse_ksymbol(&f, &m)) == KTP_OK) sum += m.addr + m.name.len;
        break;
      }
      case KTP_BPF_EVENT: {
        ktp_bpf_event m{};
        if ((pst = ktp_parse_bpf_event(&f, &m)) == KTP_OK) sum += m.id;
        break;
      }
      case KTP_HEARTBEAT: {
        ktp_heartbeat m{};
        if ((pst = ktp_parse_heartbeat(&f, &m)) == KTP_OK) sum += m.frames_sent;
        break;
      }
      default:
        break;  // the stream holds only the four types above
    }
    if (pst != KTP_OK) {
      std::fprintf(stderr, "bench: parse type %d: %s\n", f.type, ktp_status_name(pst));
      std::exit(1);
    }
    frames++;
  }
  g_sink = g_sink + sum;
  return frames;
}

uint64_t copy_and_sum(const std::vector<uint8_t>& bytes, std::vector<uint8_t>& scratch) {
  std::memcpy(scratch.data(), bytes.data(), bytes.size());
  uint64_t sum = 0;
  for (size_t i = 0; i + 8 <= scratch.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, scratch.data() + i, 8);
    sum += v;
  }
  g_sink = g_sink + sum;
  return 1;
}

// Repeats whole passes until kSecondsPerPhase has elapsed; returns passes/s
// and the last pass's result through *per_pass.
template <typename Pass>
double passes_per_second(Pass&& pass, uint64_t* per_pass) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  uint64_t passes = 0;
  double elapsed = 0;
  do {
    *per_pass = pass();
    passes++;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < kSecondsPerPhase);
  return static_cast<double>(passes) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  if (argc > 1 && !json) {
    std::fprintf(stderr, "usage: %s [--json]\n", argv[0]);
    return 2;
  }
  const Stream s = build_stream();
  std::vector<uint8_t> scratch(s.bytes.size());
  const double mb = static_cast<double>(s.bytes.size()) / 1e6;

  uint64_t frames = 0, ignored = 0;
  const double copy_passes = passes_per_second([&] { return copy_and_sum(s.bytes, scratch); }, &ignored);
  const double decode_passes = passes_per_second([&] { return decode_all(s.bytes); }, &frames);
  if (frames != s.frames) {
    std::fprintf(stderr, "bench: decoded %llu frames of %llu\n", static_cast<unsigned long long>(frames),
                 static_cast<unsigned long long>(s.frames));
    return 1;
  }
  const double frames_per_s = decode_passes * static_cast<double>(frames);
  const double decode_mb_s = decode_passes * mb;
  const double copy_mb_s = copy_passes * mb;
  const bool pass = frames_per_s >= kTargetFramesPerSecond;

  if (json) {
    std::printf(
        "{\"buffer_bytes\": %zu, \"frames\": %llu, \"avg_frame_bytes\": %.1f, \"decode_frames_per_s\": %.0f, "
        "\"decode_mb_per_s\": %.1f, \"memcpy_sum_mb_per_s\": %.1f, \"decode_vs_memcpy\": %.4f, "
        "\"target_frames_per_s\": %.0f, \"pass\": %s}\n",
        s.bytes.size(), static_cast<unsigned long long>(frames),
        static_cast<double>(s.bytes.size()) / static_cast<double>(frames), frames_per_s, decode_mb_s, copy_mb_s,
        decode_mb_s / copy_mb_s, kTargetFramesPerSecond, pass ? "true" : "false");
  } else {
    std::printf("stream    %.1f MB, %llu frames (avg %.1f bytes)\n", mb, static_cast<unsigned long long>(frames),
                static_cast<double>(s.bytes.size()) / static_cast<double>(frames));
    std::printf("baseline  memcpy + sum             %9.1f MB/s\n", copy_mb_s);
    std::printf(
        "ktproto   decode_frame + parse     %9.1f MB/s  (%.3fx memcpy)  %.2f M frames/s  target >= %.0f M/s  %s\n",
        decode_mb_s, decode_mb_s / copy_mb_s, frames_per_s / 1e6, kTargetFramesPerSecond / 1e6,
        pass ? "PASS" : "BELOW TARGET");
  }
  return 0;
}
