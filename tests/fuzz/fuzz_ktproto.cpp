// libFuzzer target: the input is the byte stream a guest could send down the
// sideband channel. It runs the receiver's loop (decode, resync on error) and
// every parser, and checks the codec's promises beyond "no sanitizer report":
// consumed sizes stay inside the input, parsed views point into the payload,
// and re-encoding a parsed message reproduces its payload byte for byte
// (the encoding has exactly one form per message).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ktproto.h"

namespace {

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

ktp_message g_message;
ktp_message_storage g_storage;
uint8_t g_out[KTP_MAX_FRAME];

struct Views {
  const ktp_frame* frame;
};

// Every string and blob of a parsed message lies inside its frame's payload.
void check_view(void* ctx, const void* p, size_t n) {
  const ktp_frame& f = *static_cast<Views*>(ctx)->frame;
  const auto* b = static_cast<const uint8_t*>(p);
  CHECK(n <= KTP_MAX_STRING);
  if (n == 0) return;
  CHECK(b >= f.payload && b + n <= f.payload + f.length);
}

// Driven by the schema: the generic parser, view walker and encoder cover
// every message in ktproto_schema.h, so a new message needs no change here.
void parse_one(const ktp_frame& f) {
  CHECK(ktp_type_name(f.type) != nullptr);  // decode_frame promised a known type
  if (ktp_parse_message(&f, &g_message, &g_storage) != KTP_OK) return;
  CHECK(g_message.type == f.type);
  Views views{&f};
  ktp_message_views(&g_message, check_view, &views);
  // encode(parse(frame)) gives back the same type, seq and payload: the
  // encoding has exactly one form per message.
  const long n = ktp_encode_message(g_out, sizeof g_out, f.seq, &g_message);
  CHECK(n >= static_cast<long>(KTP_HEADER_SIZE));
  ktp_frame again{};
  size_t consumed = 0;
  CHECK(ktp_decode_frame(g_out, static_cast<size_t>(n), &again, &consumed) == KTP_OK);
  CHECK(consumed == static_cast<size_t>(n));
  CHECK(again.type == f.type && again.seq == f.seq && again.length == f.length);
  CHECK(std::memcmp(again.payload, f.payload, f.length) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  while (at < size) {
    ktp_frame f{};
    size_t consumed = 0;
    const int st = ktp_decode_frame(data + at, size - at, &f, &consumed);
    if (st == KTP_NEED_MORE) {
      CHECK(consumed == 0);
      break;
    }
    CHECK(consumed >= 1 && consumed <= size - at);
    if (st == KTP_OK) {
      CHECK(f.payload == data + at + KTP_HEADER_SIZE && consumed == KTP_HEADER_SIZE + f.length);
      CHECK(f.length <= KTP_MAX_PAYLOAD);
      parse_one(f);
      // A parser must refuse a frame that is not its type.
      ktp_guard_ack ack{};
      if (f.type != KTP_GUARD_ACK) CHECK(ktp_parse_guard_ack(&f, &ack) == KTP_ERR_TYPE);
      at += consumed;
      continue;
    }
    CHECK(st < 0);
    at += consumed;
    const size_t skip = ktp_find_magic(data + at, size - at);
    CHECK(skip <= size - at);
    at += skip;
  }
  return 0;
}
