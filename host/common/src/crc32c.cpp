#include "kthost/common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace kt {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][i] = c;
  }
  for (size_t s = 1; s < 8; ++s)
    for (size_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}

constexpr Tables kTables = make_tables();

uint32_t update_portable(uint32_t c, const uint8_t* p, size_t len) {
  while (len >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian host (x86-64)
    const uint32_t lo = static_cast<uint32_t>(v) ^ c, hi = static_cast<uint32_t>(v >> 32);
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^ kTables[4][lo >> 24] ^
        kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^ kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xffu];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t c, const uint8_t* p, size_t len) {
  uint64_t c64 = c;
  while (len >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    len -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (len--) c = _mm_crc32_u8(c, *p++);
  return c;
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c_portable(uint32_t crc, const void* data, size_t len) {
  return ~update_portable(~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
#if defined(__x86_64__)
  if (have_sse42()) return ~update_sse42(~crc, static_cast<const uint8_t*>(data), len);
#endif
  return crc32c_portable(crc, data, len);
}

}  // namespace kt
