// PT streams are untrusted too: any bytes through the decoder (pieces,
// libipt's block decoder, the versioned image with a poke, the profile), the
// coverage fast path (its own packet reader and block walk) and the
// instruction trace must give errors, never crashes or hangs. Where the full
// decoder finds no error, the fast path's coverage must be its, exactly.
// (Where it finds errors, libipt's answer may depend on what its shared block
// cache holds from earlier decodes: the seed coverage-diverges-from-full-decoder
// decodes to two blocks fewer the second time, with decode_profile alone.)
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "kthost/decode/coverage.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/image.h"
#include "kthost/decode/symbolizer.h"

namespace {
constexpr uint64_t kText = 0xffffffff81000000ull;
struct Fixture {
  kt::VersionedImage image;
  kt::Symbolizer symbols;
  Fixture() {
    std::vector<uint8_t> code(0x1000, 0xcc);
    const uint8_t loop[] = {0x31, 0xc0, 0xe8, 0xf9, 0x00, 0x00, 0x00, 0xff, 0xc0, 0x83, 0xf8, 0x03, 0x75, 0xf4, 0xc3};
    std::copy(std::begin(loop), std::end(loop), code.begin());
    code[0x100] = 0x90;
    code[0x101] = 0xc3;
    image.add_mapping(kText, code, 0, kt::kTimeForever, "fuzz");
    image.add_poke(kText + 0x100, {0x90}, {0xcc}, 500);
    (void)image.finalize();
    (void)symbols.add_kallsyms("ffffffff81000000 T main_func\nffffffff81000100 T f_func\n", "");
    symbols.finalize();
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture f;
  kt::PtStreams pt;
  pt[0] = kt::PtStream(std::vector<uint8_t>(data, data + size));
  kt::DecodeOptions o;
  o.threads = 1;
  o.align_window = 100;
  o.cache_bits = 8;
  auto p = kt::decode_profile(pt, f.image, f.symbols, o);
  if (p.ok() && p->functions.size() > f.symbols.size()) __builtin_trap();
  auto c = kt::decode_coverage(pt, f.image, f.symbols, o);
  if (p.ok() != c.ok()) __builtin_trap();
  if (c.ok() && c->function_insns.size() > f.symbols.size()) __builtin_trap();
  if (p.ok() && p->error_counts.empty() && kt::coverage_differences(*c, kt::coverage_of(*p), f.symbols).count != 0)
    __builtin_trap();
  auto t = kt::decode_trace(pt, f.image, f.symbols, std::nullopt, 0, UINT64_MAX, 10000);
  (void)t;
  return 0;
}
