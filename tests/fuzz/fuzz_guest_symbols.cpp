// /proc/kallsyms and /proc/modules text as the guest sends it: untrusted.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kthost/introspect/guest_symbols.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  kt::GuestSymbols s;
  (void)s.parse_kallsyms(text);
  (void)s.parse_modules(text);
  for (const auto& sym : s.symbols)
    if (sym.name.empty() || sym.name.size() > kt::GuestSymbols::kMaxNameLength) __builtin_trap();
  (void)s.symbol_at(0xffffffff81000000ull);
  return 0;
}
