// libFuzzer target: the input is the byte stream a guest could send down the
// sideband channel. It runs the receiver's loop (decode, resync on error) and
// every parser, and checks the codec's promises beyond "no sanitizer report":
// consumed sizes stay inside the input, parsed views point into the payload,
// and re-encoding a parsed message reproduces its payload byte for byte
// (the encoding has exactly one form per message).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ktproto.h"

namespace {

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

ktp_symbol g_symbols[KTP_MAX_BATCH];
uint32_t g_cpus[KTP_MAX_CPUS];
uint8_t g_out[KTP_MAX_FRAME];

void check_inside(const ktp_frame& f, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (n == 0) return;
  CHECK(b >= f.payload && b + n <= f.payload + f.length);
}
void check_str(const ktp_frame& f, ktp_str s) {
  CHECK(s.len <= KTP_MAX_STRING);
  check_inside(f, s.data, s.len);
}

// encode(parse(frame)) must give back the same type, seq and payload.
void check_reencoded(const ktp_frame& f, long n) {
  CHECK(n >= static_cast<long>(KTP_HEADER_SIZE));
  ktp_frame again{};
  size_t consumed = 0;
  CHECK(ktp_decode_frame(g_out, static_cast<size_t>(n), &again, &consumed) == KTP_OK);
  CHECK(consumed == static_cast<size_t>(n));
  CHECK(again.type == f.type && again.seq == f.seq && again.length == f.length);
  CHECK(std::memcmp(again.payload, f.payload, f.length) == 0);
}

void parse_one(const ktp_frame& f) {
  const size_t cap = sizeof g_out;
  switch (f.type) {
    case KTP_HELLO: {
      ktp_hello m{};
      if (ktp_parse_hello(&f, &m) != KTP_OK) return;
      check_str(f, m.release);
      check_str(f, m.build_id);
      check_reencoded(f, ktp_encode_hello(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_HELLO_ACK: {
      ktp_hello_ack m{};
      if (ktp_parse_hello_ack(&f, &m) == KTP_OK) check_reencoded(f, ktp_encode_hello_ack(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_STATE_BEGIN: {
      ktp_state_begin m{};
      if (ktp_parse_state_begin(&f, &m) == KTP_OK) check_reencoded(f, ktp_encode_state_begin(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_STATE_SYMBOLS: {
      ktp_state_symbols m{0, g_symbols};
      if (ktp_parse_state_symbols(&f, &m) != KTP_OK) return;
      CHECK(m.count <= KTP_MAX_BATCH);
      for (uint32_t i = 0; i < m.count; i++) {
        check_str(f, m.symbols[i].name);
        check_str(f, m.symbols[i].module);
      }
      check_reencoded(f, ktp_encode_state_symbols(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_STATE_MODULE:
    case KTP_MODULE_LOAD:
    case KTP_MODULE_UNLOAD: {
      ktp_module m{};
      if (ktp_parse_module(&f, &m) != KTP_OK) return;
      check_str(f, m.name);
      check_reencoded(f, ktp_encode_module(g_out, cap, f.seq, f.type, &m));
      return;
    }
    case KTP_STATE_BPF: {
      ktp_bpf_prog m{};
      if (ktp_parse_bpf_prog(&f, &m) != KTP_OK) return;
      check_str(f, m.name);
      check_reencoded(f, ktp_encode_bpf_prog(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_STATE_CPUS: {
      ktp_cpus m{0, g_cpus};
      if (ktp_parse_cpus(&f, &m) != KTP_OK) return;
      CHECK(m.count <= KTP_MAX_CPUS);
      check_reencoded(f, ktp_encode_cpus(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_STATE_END: {
      uint64_t time = 0;
      if (ktp_parse_state_end(&f, &time) == KTP_OK) check_reencoded(f, ktp_encode_state_end(g_out, cap, f.seq, time));
      return;
    }
    case KTP_KSYMBOL: {
      ktp_ksymbol m{};
      if (ktp_parse_ksymbol(&f, &m) != KTP_OK) return;
      check_str(f, m.name);
      check_reencoded(f, ktp_encode_ksymbol(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_BPF_EVENT: {
      ktp_bpf_event m{};
      if (ktp_parse_bpf_event(&f, &m) == KTP_OK) check_reencoded(f, ktp_encode_bpf_event(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_TEXT_POKE: {
      ktp_text_poke m{};
      if (ktp_parse_text_poke(&f, &m) != KTP_OK) return;
      CHECK(m.old_len <= KTP_MAX_BLOB && m.new_len <= KTP_MAX_BLOB);
      check_inside(f, m.old_bytes, m.old_len);
      check_inside(f, m.new_bytes, m.new_len);
      check_reencoded(f, ktp_encode_text_poke(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_LOST: {
      ktp_lost m{};
      if (ktp_parse_lost(&f, &m) == KTP_OK) check_reencoded(f, ktp_encode_lost(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_GUARD_NOTICE: {
      ktp_guard_notice m{};
      if (ktp_parse_guard_notice(&f, &m) == KTP_OK) check_reencoded(f, ktp_encode_guard_notice(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_GUARD_ACK: {
      ktp_guard_ack m{};
      if (ktp_parse_guard_ack(&f, &m) == KTP_OK) check_reencoded(f, ktp_encode_guard_ack(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_HEARTBEAT: {
      ktp_heartbeat m{};
      if (ktp_parse_heartbeat(&f, &m) == KTP_OK) check_reencoded(f, ktp_encode_heartbeat(g_out, cap, f.seq, &m));
      return;
    }
    case KTP_CLOCK: {
      uint64_t time = 0;
      ktp_clock m{};
      if (ktp_parse_clock(&f, &time, &m) == KTP_OK) check_reencoded(f, ktp_encode_clock(g_out, cap, f.seq, time, &m));
      return;
    }
    case KTP_ERROR: {
      ktp_error m{};
      if (ktp_parse_error(&f, &m) != KTP_OK) return;
      check_str(f, m.message);
      check_reencoded(f, ktp_encode_error(g_out, cap, f.seq, &m));
      return;
    }
    default:
      CHECK(false);  // decode_frame promised a known type
  }
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
