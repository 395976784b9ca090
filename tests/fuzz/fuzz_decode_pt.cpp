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

#include "decode_pt_fixture.h"
#include "kthost/decode/coverage.h"
#include "kthost/decode/decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kt::DecodePtFixture f;
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
