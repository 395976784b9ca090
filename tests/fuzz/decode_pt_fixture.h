// fuzz_decode_pt's text and symbols, shared with the unit test that replays
// its finds: main_func's call loop at kDecodePtText and f_func (nop; ret) at
// +0x100, whose nop becomes int3 at time 500.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "kthost/decode/image.h"
#include "kthost/decode/symbolizer.h"

namespace kt {

constexpr uint64_t kDecodePtText = 0xffffffff81000000ull;

struct DecodePtFixture {
  VersionedImage image;
  Symbolizer symbols;
  DecodePtFixture() {
    std::vector<uint8_t> code(0x1000, 0xcc);
    const uint8_t loop[] = {0x31, 0xc0, 0xe8, 0xf9, 0x00, 0x00, 0x00, 0xff, 0xc0, 0x83, 0xf8, 0x03, 0x75, 0xf4, 0xc3};
    std::copy(std::begin(loop), std::end(loop), code.begin());
    code[0x100] = 0x90;
    code[0x101] = 0xc3;
    image.add_mapping(kDecodePtText, code, 0, kTimeForever, "fuzz");
    image.add_poke(kDecodePtText + 0x100, {0x90}, {0xcc}, 500);
    (void)image.finalize();
    (void)symbols.add_kallsyms("ffffffff81000000 T main_func\nffffffff81000100 T f_func\n", "");
    symbols.finalize();
  }
};

}  // namespace kt
