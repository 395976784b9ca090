// Kernel layout discovery from the host: which guest virtual ranges hold
// executable kernel text, found by walking the guest's own page tables (no
// /proc/kcore, no guest help), then named with guest symbols when they are
// available.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/introspect/guest_memory.h"
#include "kthost/introspect/guest_symbols.h"
#include "kthost/introspect/page_walker.h"
#include "kthost/vm/monitor.h"

namespace kt {

// x86-64 Linux: the kernel image is mapped in [kKernelImageStart, kModulesStart),
// modules, BPF JIT images and other out-of-line text in [kModulesStart, kModulesEnd).
inline constexpr uint64_t kKernelImageStart = 0xffffffff80000000ull;
inline constexpr uint64_t kModulesStart = 0xffffffffc0000000ull;
inline constexpr uint64_t kModulesEnd = 0xffffffffff000000ull;
inline constexpr uint64_t kDefaultTextBase = 0xffffffff81000000ull;  // _text without KASLR

enum class TextKind { Kernel, Module, Bpf, Other };
const char* text_kind_name(TextKind kind);

struct TextRange {
  uint64_t start = 0;
  uint64_t end = 0;  // exclusive
  TextKind kind = TextKind::Other;
  std::string name;  // "vmlinux", the module name, "bpf" or "" when unknown
  uint64_t size() const { return end - start; }
};

struct KernelLayout {
  PagingConfig paging;
  uint64_t cr3 = 0, cr4 = 0;
  bool pti = false;              // the kernel root is the PTI pair's kernel half
  uint64_t text_start = 0;       // core kernel text (_text), page aligned
  uint64_t text_end = 0;
  uint64_t kaslr_offset = 0;     // text_start - kDefaultTextBase
  std::string release;           // from linux_banner in guest memory ("" if not found)
  std::vector<TextRange> ranges; // every executable kernel range, by address

  uint64_t total_text_bytes() const;
};

// Walks the page tables rooted at CR3 (PTI aware) and builds the layout.
// `symbols` may be empty; then modules and BPF images are listed as Other.
// Errors: a root that maps no kernel text; hostile tables (from the walker).
Result<KernelLayout> discover_kernel_layout(const GuestMemory& memory, const CpuRegisters& regs,
                                            const GuestSymbols& symbols);

// Finds "Linux version <release> " in guest kernel data near the text.
Result<std::string> find_kernel_release(PageWalker& walker, const KernelLayout& layout,
                                        const GuestSymbols& symbols);

}  // namespace kt
