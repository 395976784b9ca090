// Names for addresses at a time: kallsyms (static, with module names), ksymbol
// events (BPF programs, trampolines: each with its own lifetime, so two
// programs at one address over time are two functions), module ranges, and
// source file:line from DWARF (libdw) when a vmlinux with debuginfo is given.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kthost/bundle/bundle.h"
#include "kthost/common/result.h"

namespace kt {

struct FunctionInfo {
  uint64_t start = 0, end = 0;              // address range
  uint64_t begin = 0, end_time = UINT64_MAX;  // PT time range it exists in
  std::string name;
  std::string module;  // "kernel" for the core kernel, "bpf" for BPF programs, else the module name
};

class DwarfLines;

class Symbolizer {
 public:
  static constexpr uint32_t kUnknown = 0;  // function id for addresses without a symbol

  Symbolizer();
  ~Symbolizer();
  Symbolizer(Symbolizer&&) noexcept;
  Symbolizer& operator=(Symbolizer&&) noexcept;

  // kallsyms and modules of the bundle, then its ksymbol and module events.
  static Result<Symbolizer> from_bundle(const Bundle& bundle);

  // Static symbols (kallsyms text): each runs to the next one. A module
  // symbol is dropped when the module list (read later than the guest's
  // cached kallsyms) has no such module, or puts another module at its
  // address: text freed and reused since (an unloaded module, a freed init
  // section). Listed modules left without symbols were loaded after the
  // cache was read: their addresses name only the module. Both are counted.
  Status add_kallsyms(const std::string& kallsyms_text, const std::string& modules_text);
  struct StaleSymbols {
    uint64_t dropped = 0;                          // module symbols dropped as above
    std::vector<std::string> modules_without_symbols;
  };
  const StaleSymbols& stale_symbols() const { return stale_; }
  // A symbol with a known size and lifetime (ksymbol events, tests).
  void add_dynamic(FunctionInfo info);
  // Module text ranges, so that addresses without a symbol still get a module.
  void add_module_range(const std::string& name, uint64_t start, uint64_t size);
  // Sorts; call after adding, before lookups.
  void finalize();
  // A frame no address maps to: "[base unknown]", the bottom of a call stack
  // whose lower frames the trace cannot know (the task switched in, or the
  // stack was lost to an error). Exists once finalize() ran.
  uint32_t base_unknown() const { return base_unknown_; }

  // Function id for `ip` at PT time `time` (kUnknown when none).
  uint32_t lookup(uint64_t ip, uint64_t time) const;
  const FunctionInfo& function(uint32_t id) const { return functions_[id]; }
  size_t size() const { return functions_.size(); }
  // Module of an address (for unknown addresses); "" when none.
  std::string module_of(uint64_t ip) const;

  // DWARF line tables from `vmlinux` (KASLR bias from _stext when kallsyms has it).
  // Errors: Io, InvalidInput (no DWARF).
  Status load_dwarf(const std::string& vmlinux);
  bool has_dwarf() const { return dwarf_ != nullptr; }
  // "file:line" for a runtime address, when DWARF knows it.
  std::optional<std::string> source_line(uint64_t ip) const;

 private:
  std::vector<FunctionInfo> functions_;  // [0] is "[unknown]"
  std::vector<uint32_t> static_order_;   // static ids by start
  std::vector<uint32_t> dynamic_order_;  // dynamic ids by start
  std::vector<bool> dynamic_;
  struct ModuleRange {
    std::string name;
    uint64_t start, end;
  };
  std::vector<ModuleRange> modules_;
  std::vector<uint32_t> module_unknown_;  // per module: its "[unknown]" function
  uint64_t stext_ = 0;
  uint32_t base_unknown_ = kUnknown;
  StaleSymbols stale_;
  std::unique_ptr<DwarfLines> dwarf_;
};

}  // namespace kt
