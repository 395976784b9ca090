// The perf control page and data ring as a hostile kernel (or a bug) could
// leave them: arbitrary heads and record bytes. The consumer must never read
// outside the rings (ASan checks) and never hand out more than was published.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kthost/pt/aux_ring.h"

namespace {

uint64_t take_u64(const uint8_t*& data, size_t& size) {
  uint64_t v = 0;
  size_t n = size < 8 ? size : 8;
  std::memcpy(&v, data, n);
  data += n;
  size -= n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kDataSize = 256, kAuxSize = 128;
  auto header = std::make_unique<perf_event_mmap_page>();
  std::memset(header.get(), 0, sizeof *header);
  // Heads start near the tails most of the time, so records get parsed.
  uint64_t data_head = take_u64(data, size);
  uint64_t aux_head = take_u64(data, size);
  header->data_head = (data_head >> 63) ? data_head : data_head % (kDataSize + 8);
  header->aux_head = (aux_head >> 63) ? aux_head : aux_head % (kAuxSize + 8);
  std::vector<uint8_t> data_ring(kDataSize), aux_ring(kAuxSize);
  size_t n = size < kDataSize ? size : kDataSize;
  std::memcpy(data_ring.data(), data, n);
  data += n;
  size -= n;

  kt::PerfRingLayout layout{header.get(), data_ring.data(), kDataSize, aux_ring.data(), kAuxSize};
  auto consumer = kt::AuxRingConsumer::create(layout);
  if (!consumer) __builtin_trap();
  uint64_t delivered = 0;
  auto sink = [&](std::span<const uint8_t> chunk) {
    if (chunk.data() < aux_ring.data() || chunk.data() + chunk.size() > aux_ring.data() + kAuxSize) __builtin_trap();
    delivered += chunk.size();
    return kt::ok_status();
  };
  for (int round = 0; round < 3; ++round) {
    uint64_t aux_before = header->aux_tail;
    (void)consumer->drain(sink);
    if (header->aux_tail - aux_before > kAuxSize && header->aux_tail != header->aux_head) __builtin_trap();
    // The "kernel" publishes a little more, taken from the input.
    header->data_head += take_u64(data, size) % 64;
    header->aux_head += take_u64(data, size) % 64;
  }
  if (delivered != consumer->stats().aux_bytes) __builtin_trap();
  return 0;
}
