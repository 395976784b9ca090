// The host's sideband stream decoder on arbitrary bytes, fed in arbitrary
// chunks: it must never crash, never buffer more than one frame, and keep its
// counters consistent.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kthost/sideband/decoder.h"
#include "kthost/sideband/event_log.h"
#include "ktproto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t chunk = 1 + data[0] % 64;
  kt::SidebandDecoder decoder;
  kt::EventLog log(1000);
  std::vector<kt::SidebandEvent> events;
  for (size_t i = 1; i < size; i += chunk) {
    decoder.feed(data + i, std::min(chunk, size - i), &events);
    log.append(std::move(events));
    events.clear();
  }
  for (const auto& ev : log.events()) {
    if (kt::describe(ev).empty() || kt::to_json(ev).empty()) __builtin_trap();
  }
  if (decoder.stats().skipped_bytes > size) __builtin_trap();
  return 0;
}
