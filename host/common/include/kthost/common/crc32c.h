// CRC-32C (Castagnoli): the checksum of bundle files (manifest.json) and of
// text.kts records. The same function as the sideband codec's ktp_crc32c (a
// unit test checks they agree), without linking the guest codec.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kt {

// Start with crc = 0; the initial and final xor are done inside, so calls
// chain: crc32c(crc32c(0, a), b) is the CRC of a followed by b.
// crc32c(0, "123456789", 9) == 0xE3069283. Uses the SSE4.2 crc32 instruction
// where the CPU has it, else tables (slicing by 8).
uint32_t crc32c(uint32_t crc, const void* data, size_t len);

// The table version alone, for tests and CPUs without SSE4.2.
uint32_t crc32c_portable(uint32_t crc, const void* data, size_t len);

}  // namespace kt
