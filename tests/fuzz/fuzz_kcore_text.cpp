// libFuzzer target: what `kthost export` reads from a bundle (untrusted: it
// came from disk) and builds from it. The first byte picks:
//   0: the segment merging that builds the exported kcore: ranges added and
//      cut out; segments never overlap, stay sorted, and cover exactly the
//      bytes added and not cut since;
//   1: the bundle's kcore file;
//   2: a whole export of a bundle whose kallsyms, modules and events.jsonl
//      come from the input (NUL-separated): the exporter's own parsing of
//      kallsyms and /proc/modules text, its pairing of ksymbols with BPF
//      events, and the records it writes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "kcore_text.h"
#include "kthost/bundle/bundle.h"
#include "kthost/perfdata/export.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}

void check_segments(const kt::KcoreText& k) {
  const auto& s = k.segments();
  for (size_t i = 0; i + 1 < s.size(); ++i) check(s[i].start + s[i].bytes.size() <= s[i + 1].start);
  for (const auto& seg : s) check(!seg.bytes.empty());
}

int export_bundle(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts(3);
  size_t at = 0;
  for (auto& part : parts) {
    size_t nul = text.find('\0', at);
    part = text.substr(at, nul == std::string::npos ? std::string::npos : nul - at);
    if (nul == std::string::npos) break;
    at = nul + 1;
  }
  kt::Bundle b;
  b.dir = "fuzz";
  b.manifest.cpus = {0};
  b.manifest.clock.identity = true;
  b.kallsyms = parts[0];
  b.modules = parts[1];
  if (auto events = kt::parse_events_jsonl(parts[2], "events.jsonl"); events) b.events = std::move(*events);
  static const std::string out = "/tmp/fuzz_kcore_text_export." + std::to_string(getpid());
  kt::PerfExportOptions o;
  o.out_dir = out;
  auto s = kt::export_perf_data(b, o);
  if (s) {
    size_t ksymbols = 0;
    for (const auto& e : b.events) ksymbols += e.kind == kt::BundleEvent::Kind::KsymbolRegister;
    check(s->bpf_programs <= ksymbols);
    check(s->ksymbols <= ksymbols);
  }
  return 0;
}

int merge_ranges(const uint8_t* data, size_t size) {
  // 3 bytes an operation: start offset (2), then length; a length with its
  // top bit set cuts that many bytes out instead of adding them.
  kt::KcoreText k;
  std::set<uint64_t> want;  // the bytes that must be covered
  for (size_t i = 0; i + 3 <= size; i += 3) {
    uint64_t start = 0xffffffffc0000000ull + (uint64_t{data[i]} << 8 | data[i + 1]);
    uint64_t len = data[i + 2] & 0x7f;
    if (data[i + 2] & 0x80) {
      k.cut(start, start + len);
      for (uint64_t x = start; x < start + len; ++x) want.erase(x);
    } else {
      k.add(start, std::vector<uint8_t>(len, data[i]), "fuzz");
      for (uint64_t x = start; x < start + len; ++x) want.insert(x);
    }
  }
  check_segments(k);
  uint64_t covered = 0;
  for (const auto& seg : k.segments())
    for (uint64_t x = seg.start; x < seg.start + seg.bytes.size(); ++x, ++covered) check(want.count(x) == 1);
  check(covered == want.size());
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
    case 1: {
      // As a kcore file read back from a bundle.
      static const std::string path = "/tmp/fuzz_kcore_text." + std::to_string(getpid());
      FILE* f = std::fopen(path.c_str(), "wb");
      if (!f) return 0;
      std::fwrite(data + 1, 1, size - 1, f);
      std::fclose(f);
      kt::KcoreText k;
      (void)k.add_elf(path);
      check_segments(k);
      return 0;
    }
    case 2: return export_bundle(data + 1, size - 1);
    default: return merge_ranges(data + 1, size - 1);
  }
}
