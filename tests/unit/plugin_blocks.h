// Hand-made translated blocks for the software PT plugin's unit tests
// (pt-plugin/pt_encoder.h's Block).
#pragma once

#include "pt_encoder.h"

namespace ktpt::testing {

// A kernel block of `n` 2-byte instructions at `start`, ending as `end`.
inline Block kblock(uint64_t start, uint32_t n, EndKind end, uint64_t target = 0) {
  Block b;
  b.start = start;
  b.kernel = true;
  b.n_insns = n;
  for (uint32_t i = 0; i < n; ++i) b.insn_offsets.push_back(static_cast<uint16_t>(2 * i));
  b.last = start + 2 * (n - 1);
  b.next = b.last + 2;
  b.end = end;
  b.target = target;
  return b;
}

}  // namespace ktpt::testing
