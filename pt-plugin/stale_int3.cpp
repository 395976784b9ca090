#include "stale_int3.h"

namespace ktpt {

bool is_lone_int3(const uint8_t* first_insn, size_t first_size, size_t n_insns) {
  return n_insns == 1 && first_size == 1 && first_insn && first_insn[0] == 0xcc;
}

}  // namespace ktpt
