// ktpt-compare: decodes one vCPU's PT stream (from ktpt.so) with libipt's
// instruction decoder over a kthost snapshot's kcore, and compares the decoded
// instruction addresses with the plugin's ground truth.
//
//   ktpt-compare --kcore SNAP/kcore --pt OUT/cpu0.pt --gt OUT/cpu0.gt [--examples N]
//
// Prints decode errors and events, then the agreement: GT instructions matched
// in order by decoded ones, divided by all GT instructions, and every
// disagreement grouped by class.  Exit status 0 whatever the agreement (the
// caller decides); 2 on bad input.
#include <intel-pt.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kcore_image.h"

namespace {

constexpr uint64_t kGap = 0;  // marks where decoding lost sync (no instruction has address 0 here)

std::vector<uint8_t> read_file(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = static_cast<bool>(in);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

struct DecodeResult {
  std::vector<uint64_t> ips;
  std::map<std::string, uint64_t> errors;
  std::map<std::string, uint64_t> events;
};

const char* event_name(enum pt_event_type type) {
  switch (type) {
    case ptev_enabled: return "enabled";
    case ptev_disabled: return "disabled";
    case ptev_async_disabled: return "async_disabled";
    case ptev_async_branch: return "async_branch (interrupt/exception)";
    case ptev_overflow: return "overflow";
    case ptev_exec_mode: return "exec_mode";
    case ptev_tsx: return "tsx";
    case ptev_stop: return "stop";
    case ptev_tick: return "tick";
    default: return "other";
  }
}

DecodeResult decode(std::vector<uint8_t>& pt, pt_image* image) {
  DecodeResult r;
  pt_config config;
  pt_config_init(&config);
  config.begin = pt.data();
  config.end = pt.data() + pt.size();
  pt_insn_decoder* decoder = pt_insn_alloc_decoder(&config);
  if (!decoder) return r;
  pt_insn_set_image(decoder, image);
  for (;;) {
    int status = pt_insn_sync_forward(decoder);
    if (status < 0) {
      if (status != -pte_eos) ++r.errors[std::string("sync: ") + pt_errstr(pt_errcode(status))];
      break;
    }
    for (;;) {
      while (status & pts_event_pending) {
        pt_event event;
        status = pt_insn_event(decoder, &event, sizeof event);
        if (status < 0) break;
        ++r.events[event_name(event.type)];
        if (event.type == ptev_overflow) r.ips.push_back(kGap);
      }
      if (status < 0) break;
      pt_insn insn;
      status = pt_insn_next(decoder, &insn, sizeof insn);
      if (status < 0) break;
      r.ips.push_back(insn.ip);
    }
    if (status == -pte_eos) break;
    uint64_t offset = 0;
    pt_insn_get_offset(decoder, &offset);
    ++r.errors[pt_errstr(pt_errcode(status))];
    if (r.errors.size() < 20) std::fprintf(stderr, "decode error at offset %#" PRIx64 ": %s\n", offset,
                                           pt_errstr(pt_errcode(status)));
    r.ips.push_back(kGap);
  }
  pt_insn_free_decoder(decoder);
  return r;
}

bool runs_equal(const std::vector<uint64_t>& a, size_t i, const std::vector<uint64_t>& b, size_t j, size_t n) {
  if (i + n > a.size() || j + n > b.size()) return false;
  for (size_t k = 0; k < n; ++k) {
    if (a[i + k] != b[j + k] || a[i + k] == kGap) return false;
  }
  return true;
}

struct Comparison {
  uint64_t matched = 0;
  std::map<std::string, uint64_t> classes;  // class -> GT instructions (or decoded ones) involved
  std::vector<std::string> examples;
};

void note(Comparison& c, const std::string& cls, uint64_t count, size_t limit, const std::string& example) {
  c.classes[cls] += count;
  if (c.examples.size() < limit) c.examples.push_back(cls + ": " + example);
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#" PRIx64, v);
  return buf;
}

// Greedy in-order alignment with look-ahead: on a mismatch, skip the fewest
// GT or decoded instructions that make the next 16 agree again.
Comparison compare(const std::vector<uint64_t>& gt, const std::vector<uint64_t>& dec, size_t limit) {
  constexpr size_t kConfirm = 16;
  constexpr size_t kWindow = 4096;
  constexpr size_t kResyncWindow = 50'000'000;
  Comparison c;
  size_t i = 0;
  size_t j = 0;
  while (i < gt.size() && j < dec.size()) {
    if (dec[j] == kGap) {
      // Lost sync: find where the next decoded run lies in the GT.
      ++j;
      size_t found = gt.size();
      for (size_t k = i; k < gt.size() && k < i + kResyncWindow; ++k) {
        if (runs_equal(gt, k, dec, j, kConfirm)) {
          found = k;
          break;
        }
      }
      note(c, "lost at a decode error or OVF (GT instructions skipped)", found - i, limit,
           "gt index " + std::to_string(i) + ", skipped " + std::to_string(found - i));
      i = found;
      continue;
    }
    if (gt[i] == dec[j]) {
      ++c.matched;
      ++i;
      ++j;
      continue;
    }
    size_t skip_gt = 0;
    size_t skip_dec = 0;
    for (size_t k = 1; k < kWindow; ++k) {
      if (runs_equal(gt, i + k, dec, j, kConfirm)) {
        skip_gt = k;
        break;
      }
      if (runs_equal(gt, i, dec, j + k, kConfirm)) {
        skip_dec = k;
        break;
      }
    }
    if (skip_gt == 1) {
      // One GT instruction PT does not show: did it run again right after an event?
      bool again = false;
      for (size_t k = i + 1; k < gt.size() && k < i + 2'000'000; ++k) {
        if (gt[k] == gt[i]) {
          again = true;
          break;
        }
      }
      note(c, again ? "GT insn not retired in PT (hit by a fault/interrupt, re-executed: FUP at it)"
                    : "GT insn missing from decode (single)",
           1, limit, "gt[" + std::to_string(i) + "]=" + hex(gt[i]) + " dec next " + hex(dec[j]));
      i += 1;
    } else if (skip_gt > 0) {
      note(c, "GT run missing from decode", skip_gt, limit,
           "gt[" + std::to_string(i) + "]=" + hex(gt[i]) + " len " + std::to_string(skip_gt) + " dec next " +
               hex(dec[j]));
      i += skip_gt;
    } else if (skip_dec > 0) {
      note(c, "decoded run not in GT", skip_dec, limit,
           "dec[" + std::to_string(j) + "]=" + hex(dec[j]) + " len " + std::to_string(skip_dec) + " gt next " +
               hex(gt[i]));
      j += skip_dec;
    } else {
      note(c, "unaligned (no resync within window)", 1, limit,
           "gt[" + std::to_string(i) + "]=" + hex(gt[i]) + " dec[" + std::to_string(j) + "]=" + hex(dec[j]));
      ++i;
      ++j;
    }
  }
  if (i < gt.size()) note(c, "GT tail after the last decoded instruction", gt.size() - i, limit, hex(gt[i]));
  if (j < dec.size()) note(c, "decoded tail after the GT ends", dec.size() - j, limit, hex(dec[j]));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kcore, pt_path, gt_path;
  size_t examples = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string opt = argv[i];
    if (opt == "--kcore") kcore = argv[i + 1];
    else if (opt == "--pt") pt_path = argv[i + 1];
    else if (opt == "--gt") gt_path = argv[i + 1];
    else if (opt == "--examples") examples = std::stoul(argv[i + 1]);
  }
  if (kcore.empty() || pt_path.empty()) {
    std::fprintf(stderr, "usage: ktpt-compare --kcore FILE --pt FILE [--gt FILE] [--examples N]\n");
    return 2;
  }
  pt_image* image = pt_image_alloc("kcore");
  std::string error;
  const int segments = ktpt::add_kcore_segments(image, kcore, error);
  if (segments < 0) {
    std::fprintf(stderr, "ktpt-compare: %s\n", error.c_str());
    return 2;
  }
  bool ok = false;
  std::vector<uint8_t> pt = read_file(pt_path, ok);
  if (!ok) {
    std::fprintf(stderr, "ktpt-compare: cannot read %s\n", pt_path.c_str());
    return 2;
  }
  const DecodeResult r = decode(pt, image);
  std::printf("pt: %s, %zu bytes; kcore: %d segments\n", pt_path.c_str(), pt.size(), segments);
  size_t decoded = 0;
  for (uint64_t ip : r.ips) decoded += ip != kGap;
  std::printf("decoded instructions: %zu\n", decoded);
  for (const auto& [name, n] : r.events) std::printf("  event %-40s %" PRIu64 "\n", name.c_str(), n);
  for (const auto& [name, n] : r.errors) std::printf("  decode error %-33s %" PRIu64 "\n", name.c_str(), n);
  if (!gt_path.empty()) {
    std::vector<uint8_t> raw = read_file(gt_path, ok);
    if (!ok || raw.size() % 8 != 0) {
      std::fprintf(stderr, "ktpt-compare: cannot read %s (or not a whole number of u64)\n", gt_path.c_str());
      return 2;
    }
    std::vector<uint64_t> gt(raw.size() / 8);
    std::memcpy(gt.data(), raw.data(), raw.size());
    const Comparison c = compare(gt, r.ips, examples);
    const double pct = gt.empty() ? 0.0 : 100.0 * static_cast<double>(c.matched) / static_cast<double>(gt.size());
    std::printf("ground truth instructions: %zu\nmatched in order: %" PRIu64 "\nagreement: %.5f%%\n", gt.size(),
                c.matched, pct);
    for (const auto& [name, n] : c.classes) std::printf("  disagreement %-70s %" PRIu64 "\n", name.c_str(), n);
    for (const std::string& e : c.examples) std::printf("  example: %s\n", e.c_str());
  }
  pt_image_free(image);
  return 0;
}
