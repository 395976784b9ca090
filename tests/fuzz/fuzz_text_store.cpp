// The text store file (host/textstore) read back from a bundle: untrusted.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kthost/textstore/text_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto s = kt::parse_text_store(data, size, "text.kts", uint64_t{64} << 20);
  if (!s.ok()) return 0;
  uint64_t total = 0;
  for (const auto& r : s->records) {
    if (r.bytes.size() > kt::kTextStoreMaxData || r.name.size() > kt::kTextStoreMaxName) __builtin_trap();
    total += r.bytes.size();
  }
  if (s->valid_bytes + s->ignored_tail != size || total > (uint64_t{64} << 20)) __builtin_trap();
  // What parses re-encodes to the same bytes.
  size_t off = kt::kTextStoreHeaderSize;
  for (const auto& r : s->records) {
    // Old bundles' load kinds are renumbered on reading (text_kind_of); encode
    // what was stored to compare the rest byte for byte.
    kt::TextRecord stored = r;
    stored.kind = static_cast<uint16_t>(data[off + 30] | data[off + 31] << 8);
    auto enc = kt::encode_text_record(stored);
    if (off + enc.size() > size || std::memcmp(data + off, enc.data(), enc.size()) != 0) __builtin_trap();
    off += enc.size();
  }
  return 0;
}
