// Feeds arbitrary bytes as the guest's exec response stream. The decoder must
// never read out of bounds, never return more output than the limit, and
// always make progress or ask for more bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ktexec_proto.h"
#include "kthost/vm/guest_exec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  // The first 4 bytes choose the id we wait for; the rest is the stream.
  uint32_t want_id = static_cast<uint32_t>(data[0]) | static_cast<uint32_t>(data[1]) << 8 |
                     static_cast<uint32_t>(data[2]) << 16 | static_cast<uint32_t>(data[3]) << 24;
  std::string_view stream(reinterpret_cast<const char*>(data) + 4, size - 4);
  for (int rounds = 0; rounds < 1000; ++rounds) {
    size_t before = stream.size();
    auto result = kt::decode_exec_response(stream, want_id);
    if (stream.size() > before) std::abort();
    if (result.ok() && result->has_value()) {
      if ((*result)->output.size() > KTEXEC_MAX_OUTPUT) std::abort();
      continue;
    }
    if (result.ok()) {
      if (kt::exec_response_bytes_wanted(stream) == 0) std::abort();
      break;  // needs more bytes
    }
    if (stream.size() == before) std::abort();  // an error must still make progress
  }
  return 0;
}
