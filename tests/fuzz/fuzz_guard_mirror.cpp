// ktguard's shared block as kthost reads it from guest RAM (GuardMirror):
// untrusted bytes. The input is the block itself (its first 16 KiB) and,
// after it, a second read of its notice table; the block is put in a
// BufferMemory and polled as the trace does.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kthost/capture/guard_mirror.h"
#include "ktguard_uapi.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kBlock = 0x10000;
  auto header = kt::parse_guard_mirror_header(data, size, kBlock);
  if (header) {
    const auto& l = *header;
    if (uint64_t{l.notice_offset} + l.table_bytes() > KTGUARD_SHARED_SIZE) __builtin_trap();
    if (uint64_t{l.ack_offset} + uint64_t{l.slots} * 8 > KTGUARD_SHARED_SIZE) __builtin_trap();
    const size_t block = std::min<size_t>(size, KTGUARD_SHARED_SIZE);
    std::vector<uint8_t> table(data + std::min<size_t>(block, l.notice_offset), data + block);
    std::vector<uint8_t> second(data + block, data + size);
    uint64_t rejected = 0;
    for (const auto& m : kt::whole_mirror_notices(l, table, second, &rejected)) {
      if (m.notice.id == 0 || m.notice.end <= m.notice.start || m.notice.end - m.notice.start > (64u << 20))
        __builtin_trap();
      if (m.notice.ack_addr < kBlock + l.ack_offset || m.notice.ack_addr >= kBlock + l.ack_offset + 8ull * l.slots)
        __builtin_trap();
    }
  }
  // The same bytes as guest RAM, found from every ack word and polled twice.
  kt::BufferMemory mem(kBlock + 2 * KTGUARD_SHARED_SIZE);
  mem.write(kBlock, data, std::min<size_t>(size, KTGUARD_SHARED_SIZE));
  kt::GuardMirror mirror(mem);
  if (size >= 16 && mirror.locate(kBlock + (data[0] | (data[1] << 8))).ok()) {
    for (int i = 0; i < 2; ++i)
      if (auto got = mirror.poll(); !got) break;
  }
  return 0;
}
