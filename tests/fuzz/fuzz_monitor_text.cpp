// Text from the QEMU monitor: info registers, info mtree -f, gpa2hva answers,
// and a QMP error member.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kthost/introspect/backends.h"
#include "kthost/vm/monitor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)kt::parse_info_registers(text);
  (void)kt::parse_gpa2hva(text);
  auto error = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!error.is_discarded()) (void)kt::qmp_error_text(error);
  auto map = kt::parse_mtree_ram(text);
  if (map) {
    // Regions must come out sorted and non-overlapping whatever the input.
    uint64_t end = 0;
    for (const auto& r : map->regions()) {
      if (r.gpa < end) __builtin_trap();
      end = r.gpa + r.size;
    }
    (void)map->to_offset(0x100000, 4096);
  }
  return 0;
}
