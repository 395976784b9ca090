// Text of intel_pt sysfs files (format/*, caps/*) and KVM debugfs values:
// untrusted when they come from a captured tree or an unknown kernel.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kthost/pt/kvm_tsc.h"
#include "kthost/pt/pmu.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto field = kt::parse_format_spec("fuzz", text);
  if (field) {
    if (field->ranges.empty() || field->width() > 64) __builtin_trap();
    for (const auto& r : field->ranges)
      if (r.low > r.high || r.high > 63) __builtin_trap();
    uint64_t word = 0;
    if (!field->place(field->max_value(), word)) __builtin_trap();
    // Every bit of the field set, and nothing else.
    uint64_t expected = 0;
    for (const auto& r : field->ranges)
      expected |= (r.width() >= 64 ? ~0ull : ((1ull << r.width()) - 1)) << r.low;
    if (word != expected) __builtin_trap();
    if (field->max_value() != ~0ull && field->place(field->max_value() + 1, word)) __builtin_trap();
  }
  (void)kt::parse_cap_value(text);
  (void)kt::parse_kvm_signed(text);
  (void)kt::parse_kvm_unsigned(text);
  return 0;
}
