// Guest symbols as the guest reports them: /proc/kallsyms and /proc/modules
// text. The text is untrusted: lines are length-limited, addresses must parse,
// names are sanitised, and the totals are bounded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

struct KernelSymbol {
  uint64_t address = 0;
  char type = '?';      // kallsyms type letter
  std::string name;
  std::string module;   // "" for the core kernel, "bpf" for BPF programs
};

struct GuestModule {
  std::string name;
  uint64_t base = 0;  // core layout base (text starts here)
  uint64_t size = 0;  // core layout size (text + rodata + data)
};

struct GuestSymbols {
  std::vector<KernelSymbol> symbols;  // sorted by address
  std::vector<GuestModule> modules;
  uint64_t skipped_lines = 0;         // malformed lines, counted, never silent

  static constexpr size_t kMaxSymbols = 4u << 20;
  static constexpr size_t kMaxNameLength = 512;

  // Parses /proc/kallsyms text. Malformed lines are skipped and counted;
  // exceeding kMaxSymbols is an error.
  Status parse_kallsyms(const std::string& text);
  // Parses /proc/modules text ("name size refs deps state address").
  Status parse_modules(const std::string& text);

  const KernelSymbol* find(const std::string& name) const;
  // The symbol at or below `address` (nullptr when none).
  const KernelSymbol* symbol_at(uint64_t address) const;
  bool empty() const { return symbols.empty(); }
};

}  // namespace kt
