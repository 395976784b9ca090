#include "classify.h"

#include <Zydis/Zydis.h>

namespace ktpt {
namespace {

struct Decoded {
  ZydisDecodedInstruction insn;
  ZydisDecodedOperand operands[ZYDIS_MAX_OPERAND_COUNT];
};

bool decode(const uint8_t* bytes, size_t size, Decoded& out) {
  static thread_local ZydisDecoder decoder;
  static thread_local bool ready = false;
  if (!ready) {
    ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    ready = true;
  }
  return ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, bytes, size, &out.insn, out.operands));
}

// The first visible operand of a relative branch is its immediate.
bool relative_target(const Decoded& d, uint64_t address, uint64_t& target) {
  for (unsigned i = 0; i < d.insn.operand_count_visible; ++i) {
    const ZydisDecodedOperand& op = d.operands[i];
    if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative) {
      ZyanU64 result = 0;
      if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&d.insn, &op, address, &result))) return false;
      target = result;
      return true;
    }
  }
  return false;
}

}  // namespace

bool is_rep_string(const uint8_t* bytes, size_t size) {
  Decoded d;
  if (!decode(bytes, size, d)) return false;
  return d.insn.meta.category == ZYDIS_CATEGORY_STRINGOP &&
         (d.insn.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) != 0;
}

InsnFacts instruction_facts(const uint8_t* bytes, size_t size) {
  InsnFacts f;
  Decoded d;
  if (!decode(bytes, size, d)) return f;
  f.rep_string = d.insn.meta.category == ZYDIS_CATEGORY_STRINGOP &&
                 (d.insn.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) != 0;
  const ZydisInstructionCategory category = d.insn.meta.category;
  const bool no_access = category == ZYDIS_CATEGORY_NOP || category == ZYDIS_CATEGORY_WIDENOP ||
                         category == ZYDIS_CATEGORY_PREFETCH || category == ZYDIS_CATEGORY_PREFETCHWT1 ||
                         d.insn.mnemonic == ZYDIS_MNEMONIC_CLFLUSH || d.insn.mnemonic == ZYDIS_MNEMONIC_CLFLUSHOPT ||
                         d.insn.mnemonic == ZYDIS_MNEMONIC_CLWB;
  unsigned accesses = 0;
  for (unsigned i = 0; i < d.insn.operand_count && !no_access; ++i) {
    const ZydisDecodedOperand& op = d.operands[i];
    if (op.type != ZYDIS_OPERAND_TYPE_MEMORY || op.mem.type != ZYDIS_MEMOP_TYPE_MEM) continue;
    accesses += (op.actions & ZYDIS_OPERAND_ACTION_MASK_READ) ? 1u : 0u;
    accesses += (op.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) ? 1u : 0u;
  }
  // QEMU does a locked read-modify-write (and XCHG with memory) as one atomic access.
  const bool atomic = (d.insn.attributes & ZYDIS_ATTRIB_HAS_LOCK) != 0 || d.insn.mnemonic == ZYDIS_MNEMONIC_XCHG;
  if (atomic && accesses > 1) accesses = 1;
  f.accesses_memory = accesses > 0;
  f.memory_accesses = static_cast<uint8_t>(accesses > 255 ? 255 : accesses);
  f.branch = classify_instruction(bytes, size, 0).kind != EndKind::Fallthrough && !f.rep_string;
  return f;
}

EndClass classify_instruction(const uint8_t* bytes, size_t size, uint64_t address) {
  EndClass c;
  Decoded d;
  if (!decode(bytes, size, d)) return c;
  c.valid = true;
  switch (d.insn.mnemonic) {
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ:
      c.kind = EndKind::Iret;
      return c;
    case ZYDIS_MNEMONIC_SYSRET:
    case ZYDIS_MNEMONIC_SYSEXIT:
      c.kind = EndKind::ToUser;
      return c;
    case ZYDIS_MNEMONIC_INT:
    case ZYDIS_MNEMONIC_INT1:
    case ZYDIS_MNEMONIC_INT3:
    case ZYDIS_MNEMONIC_INTO:
    case ZYDIS_MNEMONIC_UD0:
    case ZYDIS_MNEMONIC_UD1:
    case ZYDIS_MNEMONIC_UD2:
    case ZYDIS_MNEMONIC_SYSCALL:
    case ZYDIS_MNEMONIC_SYSENTER:
      c.kind = EndKind::SoftInt;
      return c;
    case ZYDIS_MNEMONIC_HLT:
    case ZYDIS_MNEMONIC_MWAIT:
      c.kind = EndKind::Halt;
      return c;
    default:
      break;
  }
  switch (d.insn.meta.category) {
    case ZYDIS_CATEGORY_COND_BR:  // Jcc, JrCXZ, LOOP, LOOPE, LOOPNE
      c.kind = relative_target(d, address, c.target) ? EndKind::Cond : EndKind::Indirect;
      return c;
    case ZYDIS_CATEGORY_UNCOND_BR:
      c.kind = relative_target(d, address, c.target) ? EndKind::DirectJmp : EndKind::Indirect;
      return c;
    case ZYDIS_CATEGORY_CALL:
      c.kind = relative_target(d, address, c.target) ? EndKind::DirectCall : EndKind::Indirect;
      return c;
    case ZYDIS_CATEGORY_RET:
      c.kind = EndKind::Return;
      return c;
    case ZYDIS_CATEGORY_STRINGOP:
      if (d.insn.attributes & (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) {
        c.kind = EndKind::Rep;
      }
      return c;
    default:
      return c;
  }
}

}  // namespace ktpt
