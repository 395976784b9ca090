// libFuzzer target: the kcore that `kthost export` reads from a bundle
// (untrusted: it came from disk), and the segment merging that builds the
// exported kcore. Besides "no crash, no sanitizer report": segments never
// overlap, stay sorted, and cover every byte that was added.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kcore_text.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}

void check_segments(const kt::KcoreText& k) {
  const auto& s = k.segments();
  for (size_t i = 0; i + 1 < s.size(); ++i) check(s[i].start + s[i].bytes.size() <= s[i + 1].start);
  for (const auto& seg : s) check(!seg.bytes.empty());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] & 1) {
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
  // As ranges added in order: 3 bytes each (start offset, length).
  kt::KcoreText k;
  std::vector<std::pair<uint64_t, uint64_t>> added;
  for (size_t i = 1; i + 3 <= size; i += 3) {
    uint64_t start = 0xffffffffc0000000ull + (uint64_t{data[i]} << 8 | data[i + 1]);
    std::vector<uint8_t> bytes(data[i + 2], data[i]);
    k.add(start, bytes, "fuzz");
    if (!bytes.empty()) added.push_back({start, start + bytes.size()});
  }
  check_segments(k);
  for (const auto& [a, z] : added)
    for (uint64_t x = a; x < z; ++x) {
      bool covered = false;
      for (const auto& s : k.segments()) covered = covered || (x >= s.start && x < s.start + s.bytes.size());
      check(covered);
    }
  return 0;
}
