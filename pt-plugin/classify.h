// Classifies the last instruction of a translated block with Zydis.
#ifndef KTHOST_PT_CLASSIFY_H
#define KTHOST_PT_CLASSIFY_H

#include <cstddef>
#include <cstdint>

#include "pt_encoder.h"

namespace ktpt {

struct EndClass {
  EndKind kind = EndKind::Fallthrough;
  uint64_t target = 0;  // for Cond, DirectJmp, DirectCall
  bool valid = false;   // false: Zydis could not decode the bytes (treated as Fallthrough)
};

// `bytes`/`size`: one instruction at `address`, 64-bit mode.
EndClass classify_instruction(const uint8_t* bytes, size_t size, uint64_t address);

// Is this a REP/REPE/REPNE string instruction (QEMU runs one iteration per block execution)?
bool is_rep_string(const uint8_t* bytes, size_t size);

struct InsnFacts {
  bool rep_string = false;
  bool accesses_memory = false;  // an explicit or implicit (stack) memory operand that is read or written
  uint8_t memory_accesses = 0;   // loads + stores QEMU reports for one execution (RMW = 2, LOCK = 1)
  bool branch = false;           // any control transfer, including INT/IRET/SYSRET
};

// For the ground truth: facts about one instruction (all false if undecodable).
InsnFacts instruction_facts(const uint8_t* bytes, size_t size);

}  // namespace ktpt

#endif
