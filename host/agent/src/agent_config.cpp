#include "kthost/agent/agent_config.h"

#include "kthost/common/strings.h"

namespace kt {

Result<uint64_t> parse_byte_size(const std::string& text, const std::string& what) {
  std::string_view t = trim(text);
  uint64_t mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'K': case 'k': mult = 1ull << 10; break;
      case 'M': case 'm': mult = 1ull << 20; break;
      case 'G': case 'g': mult = 1ull << 30; break;
      case 'T': case 't': mult = 1ull << 40; break;
      default: break;
    }
    if (mult != 1) t.remove_suffix(1);
  }
  auto v = parse_u64(t, 10);
  if (!v || *v > UINT64_MAX / mult)
    return Error(ErrorCode::InvalidArgument,
                 what + " takes a size in bytes with an optional K, M, G or T (binary) suffix, not '" +
                     sanitize_name(text, 40) + "'");
  return *v * mult;
}

}  // namespace kt
