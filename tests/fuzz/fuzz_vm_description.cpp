// The VM description is a file read back from disk: untrusted.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kthost/vm/vm_description.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto d = kt::VmDescription::parse(text);
  if (d) {
    auto again = kt::VmDescription::parse(d->to_json());
    if (!again || again->to_json() != d->to_json()) __builtin_trap();  // round trip must hold
  }
  return 0;
}
