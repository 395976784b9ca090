// The sideband codec on bad input: one test per error status, the resync loop
// a receiver runs, and encoders given too little room or oversized inputs.
// Split from ktproto_test.cpp (round trips) to keep both files short.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ktproto.h"

namespace {

using Bytes = std::vector<uint8_t>;

void put_le(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; i++) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Framing as PROTOCOL.md specifies it, so payloads the encoders refuse to
// produce (oversized, truncated, trailing) can still be put on the wire.
Bytes frame_by_hand(uint8_t type, const Bytes& payload, uint8_t version = KTP_VERSION) {
  Bytes b = {'K', 'T', 'S', 'B', version, type, 0, 0};
  put_le(b, payload.size(), 4);
  put_le(b, 0, 4);
  put_le(b, 99, 8);
  b.insert(b.end(), payload.begin(), payload.end());
  const uint32_t crc = ktp_crc32c(0, b.data(), b.size());
  for (int i = 0; i < 4; i++) b[12 + static_cast<size_t>(i)] = static_cast<uint8_t>(crc >> (8 * i));
  return b;
}

Bytes payload_of(const Bytes& frame) { return Bytes(frame.begin() + KTP_HEADER_SIZE, frame.end()); }

int decode(const Bytes& b, ktp_frame* f, size_t* consumed) { return ktp_decode_frame(b.data(), b.size(), f, consumed); }

Bytes hello_frame() {
  ktp_hello h{};
  h.cpu_count = 4;
  h.release = ktp_str{"6.1.0", 5};
  h.build_id = ktp_str{"abcd", 4};
  Bytes b(KTP_MAX_FRAME);
  const long n = ktp_encode_hello(b.data(), b.size(), 0, &h);
  b.resize(static_cast<size_t>(n));
  return b;
}

// One valid frame per message type, with the parser that accepts it.
struct Case {
  Bytes frame;
  std::function<int(const ktp_frame*)> parse;
};

std::vector<Case> every_type() {
  static ktp_symbol sym_slots[KTP_MAX_BATCH];
  static uint32_t cpu_slots[KTP_MAX_CPUS];
  static ktp_hello hello;
  static ktp_hello_ack ack;
  static ktp_state_begin begin;
  static ktp_state_symbols syms{0, sym_slots};
  static ktp_module mod;
  static ktp_bpf_prog prog;
  static ktp_cpus cpus{0, cpu_slots};
  static ktp_state_end end;
  static ktp_ksymbol ksym;
  static ktp_bpf_event bev;
  static ktp_text_poke poke;
  static ktp_lost lost;
  static ktp_guard_notice notice;
  static ktp_guard_ack gack;
  static ktp_heartbeat hb;
  static ktp_clock_change clock;
  static ktp_error err;
  static ktp_guard_state gstate;
  static ktp_guard_hooks ghooks;
  static uint32_t switch_slots[KTP_MAX_SWITCH_WORDS];
  static ktp_task_switches tswitches{0, 0, 0, switch_slots};

  std::vector<Case> cases;
  auto add = [&](std::function<long(uint8_t*, size_t)> enc, std::function<int(const ktp_frame*)> parse) {
    Bytes b(KTP_MAX_FRAME);
    const long n = enc(b.data(), b.size());
    EXPECT_GT(n, 0);
    b.resize(static_cast<size_t>(n));
    cases.push_back({b, std::move(parse)});
  };
  const ktp_str name{"name", 4};
  ktp_symbol in_syms[2] = {{1, 'T', name, name}, {2, 't', name, ktp_str{"", 0}}};
  uint32_t in_cpus[3] = {0, 1, 5};
  const uint8_t bytes[5] = {1, 2, 3, 4, 5};

  add([&](uint8_t* p, size_t c) { return ktp_encode_hello(p, c, 0, &hello); },
      [](auto f) { return ktp_parse_hello(f, &hello); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_hello_ack(p, c, 0, &ack); },
      [](auto f) { return ktp_parse_hello_ack(f, &ack); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_host_hello(p, c, 0, &ack); },
      [](auto f) { return ktp_parse_host_hello(f, &ack); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_state_begin(p, c, 0, &begin); },
      [](auto f) { return ktp_parse_state_begin(f, &begin); });
  const ktp_state_symbols in_batch{2, in_syms};
  add([&](uint8_t* p, size_t c) { return ktp_encode_state_symbols(p, c, 0, &in_batch); },
      [](auto f) { return ktp_parse_state_symbols(f, &syms); });
  const ktp_module in_mod{1, name, 2, 3, 4, 5};
  add([&](uint8_t* p, size_t c) { return ktp_encode_state_module(p, c, 0, &in_mod); },
      [](auto f) { return ktp_parse_state_module(f, &mod); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_module_load(p, c, 0, &in_mod); },
      [](auto f) { return ktp_parse_module_load(f, &mod); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_module_unload(p, c, 0, &in_mod); },
      [](auto f) { return ktp_parse_module_unload(f, &mod); });
  const ktp_bpf_prog in_prog{1, 2, {}, name, 3, 4};
  add([&](uint8_t* p, size_t c) { return ktp_encode_state_bpf(p, c, 0, &in_prog); },
      [](auto f) { return ktp_parse_state_bpf(f, &prog); });
  const ktp_cpus in_cpu_list{3, in_cpus};
  add([&](uint8_t* p, size_t c) { return ktp_encode_state_cpus(p, c, 0, &in_cpu_list); },
      [](auto f) { return ktp_parse_state_cpus(f, &cpus); });
  const ktp_state_end in_end{1};
  add([&](uint8_t* p, size_t c) { return ktp_encode_state_end(p, c, 0, &in_end); },
      [](auto f) { return ktp_parse_state_end(f, &end); });
  const ktp_ksymbol in_ksym{1, 2, 3, 4, 5, 6, name};
  add([&](uint8_t* p, size_t c) { return ktp_encode_ksymbol(p, c, 0, &in_ksym); },
      [](auto f) { return ktp_parse_ksymbol(f, &ksym); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_bpf_event(p, c, 0, &bev); },
      [](auto f) { return ktp_parse_bpf_event(f, &bev); });
  const ktp_text_poke in_poke{1, 2, 3, 5, bytes, 5, bytes};
  add([&](uint8_t* p, size_t c) { return ktp_encode_text_poke(p, c, 0, &in_poke); },
      [](auto f) { return ktp_parse_text_poke(f, &poke); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_lost(p, c, 0, &lost); },
      [](auto f) { return ktp_parse_lost(f, &lost); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_guard_notice(p, c, 0, &notice); },
      [](auto f) { return ktp_parse_guard_notice(f, &notice); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_guard_ack(p, c, 0, &gack); },
      [](auto f) { return ktp_parse_guard_ack(f, &gack); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_heartbeat(p, c, 0, &hb); },
      [](auto f) { return ktp_parse_heartbeat(f, &hb); });
  add([&](uint8_t* p, size_t c) { return ktp_encode_clock(p, c, 0, &clock); },
      [](auto f) { return ktp_parse_clock(f, &clock); });
  const ktp_error in_err{name};
  add([&](uint8_t* p, size_t c) { return ktp_encode_error(p, c, 0, &in_err); },
      [](auto f) { return ktp_parse_error(f, &err); });
  const ktp_guard_state in_gstate{1, KTP_GUARD_ABSENT, name};
  add([&](uint8_t* p, size_t c) { return ktp_encode_guard_state(p, c, 0, &in_gstate); },
      [](auto f) { return ktp_parse_guard_state(f, &gstate); });
  const ktp_guard_hooks in_ghooks{2, name};
  add([&](uint8_t* p, size_t c) { return ktp_encode_guard_hooks(p, c, 0, &in_ghooks); },
      [](auto f) { return ktp_parse_guard_hooks(f, &ghooks); });
  uint32_t in_switch_words[4] = {0, 17, 900, 0};
  const ktp_task_switches in_tswitches{1000, 1, 4, in_switch_words};
  add([&](uint8_t* p, size_t c) { return ktp_encode_task_switches(p, c, 0, &in_tswitches); },
      [](auto f) { return ktp_parse_task_switches(f, &tswitches); });
  return cases;
}

TEST(KtprotoErrors, EveryTypeIsCovered) {
  std::set<uint8_t> types;
  for (const Case& c : every_type()) types.insert(c.frame[5]);
  EXPECT_EQ(types.size(), size_t{KTP_TYPE_MAX});
}

TEST(KtprotoErrors, BadMagicConsumesOneByte) {
  Bytes b = hello_frame();
  b[0] = 'X';
  ktp_frame f{};
  size_t consumed = 99;
  EXPECT_EQ(decode(b, &f, &consumed), KTP_ERR_MAGIC);
  EXPECT_EQ(consumed, 1u);
  // A partial magic that already mismatches is refused without waiting.
  const Bytes partial = {'K', 'X'};
  EXPECT_EQ(decode(partial, &f, &consumed), KTP_ERR_MAGIC);
  EXPECT_EQ(consumed, 1u);
  EXPECT_EQ(decode(Bytes{}, &f, &consumed), KTP_NEED_MORE);
  EXPECT_EQ(consumed, 0u);
}

TEST(KtprotoErrors, WrongVersionIsRefusedAfterMagic) {
  const Bytes b = frame_by_hand(KTP_HELLO, payload_of(hello_frame()), KTP_VERSION + 1);
  ktp_frame f{};
  size_t consumed = 0;
  EXPECT_EQ(decode(b, &f, &consumed), KTP_ERR_VERSION);
  EXPECT_EQ(consumed, 1u);
  // Known from the first five bytes: a peer of another version gets a clear answer at once.
  EXPECT_EQ(ktp_decode_frame(b.data(), 5, &f, &consumed), KTP_ERR_VERSION);
  EXPECT_EQ(ktp_decode_frame(b.data(), 4, &f, &consumed), KTP_NEED_MORE);
}

TEST(KtprotoErrors, LengthOverMaximum) {
  Bytes b = {'K', 'T', 'S', 'B', KTP_VERSION, KTP_HEARTBEAT, 0, 0};
  put_le(b, KTP_MAX_PAYLOAD + 1, 4);
  ktp_frame f{};
  size_t consumed = 0;
  EXPECT_EQ(decode(b, &f, &consumed), KTP_ERR_LENGTH);
  EXPECT_EQ(consumed, 1u);
  b.resize(8);
  put_le(b, KTP_MAX_PAYLOAD, 4);
  EXPECT_EQ(decode(b, &f, &consumed), KTP_NEED_MORE);
}

TEST(KtprotoErrors, NoSingleBitFlipDecodesAsOk) {
  const Bytes good = hello_frame();
  for (size_t bit = 0; bit < good.size() * 8; bit++) {
    Bytes b = good;
    b[bit / 8] = static_cast<uint8_t>(b[bit / 8] ^ (1u << (bit % 8)));
    ktp_frame f{};
    size_t consumed = 0;
    const int st = decode(b, &f, &consumed);
    ASSERT_NE(st, KTP_OK) << "bit " << bit;
    // Past magic, version and length, every flip is the checksum's to catch.
    if (bit / 8 >= 12 || bit / 8 == 5 || bit / 8 == 6 || bit / 8 == 7) {
      EXPECT_EQ(st, KTP_ERR_CRC) << "bit " << bit;
      EXPECT_EQ(consumed, 1u);
    }
  }
}

TEST(KtprotoErrors, UnknownTypeWithGoodCrcIsSkippedWhole) {
  for (uint8_t type : {uint8_t{0}, uint8_t{KTP_TYPE_MAX + 1}, uint8_t{255}}) {
    const Bytes b = frame_by_hand(type, Bytes{1, 2, 3});
    ktp_frame f{};
    size_t consumed = 0;
    EXPECT_EQ(decode(b, &f, &consumed), KTP_ERR_TYPE);
    EXPECT_EQ(consumed, b.size());
  }
}

TEST(KtprotoErrors, ParsersRefuseOtherTypes) {
  const std::vector<Case> cases = every_type();
  for (const Case& parser : cases) {
    for (const Case& frame : cases) {
      ktp_frame f{};
      size_t consumed = 0;
      ASSERT_EQ(decode(frame.frame, &f, &consumed), KTP_OK);
      if (f.type == parser.frame[5]) continue;
      EXPECT_EQ(parser.parse(&f), KTP_ERR_TYPE) << int{parser.frame[5]} << " given " << int{f.type};
    }
  }
}

TEST(KtprotoErrors, TruncatedAndTrailingPayloadsForEveryType) {
  for (const Case& c : every_type()) {
    const uint8_t type = c.frame[5];
    const Bytes payload = payload_of(c.frame);
    ktp_frame f{};
    size_t consumed = 0;
    ASSERT_EQ(decode(c.frame, &f, &consumed), KTP_OK);
    ASSERT_EQ(c.parse(&f), KTP_OK) << int{type};
    for (size_t k = 0; k < payload.size(); k++) {
      const Bytes cut = frame_by_hand(type, Bytes(payload.begin(), payload.begin() + static_cast<long>(k)));
      ASSERT_EQ(decode(cut, &f, &consumed), KTP_OK);
      EXPECT_EQ(c.parse(&f), KTP_ERR_TRUNCATED) << int{type} << " cut at " << k;
    }
    Bytes longer = payload;
    longer.push_back(0);
    const Bytes extra = frame_by_hand(type, longer);
    ASSERT_EQ(decode(extra, &f, &consumed), KTP_OK);
    EXPECT_EQ(c.parse(&f), KTP_ERR_TRAILING) << int{type};
  }
}

TEST(KtprotoErrors, StringBlobAndCountLimits) {
  ktp_frame f{};
  size_t consumed = 0;
  ktp_error err{};
  for (uint16_t len : {uint16_t{KTP_MAX_STRING}, uint16_t{KTP_MAX_STRING + 1}}) {
    Bytes payload;
    put_le(payload, len, 2);
    payload.resize(payload.size() + len, 'a');
    const Bytes b = frame_by_hand(KTP_ERROR, payload);
    ASSERT_EQ(decode(b, &f, &consumed), KTP_OK);
    EXPECT_EQ(ktp_parse_error(&f, &err), len > KTP_MAX_STRING ? KTP_ERR_BOUNDS : KTP_OK);
  }
  // An oversized claim is BOUNDS even when the bytes are not there either.
  Bytes claim;
  put_le(claim, 0xffff, 2);
  const Bytes short_claim = frame_by_hand(KTP_ERROR, claim);
  ASSERT_EQ(decode(short_claim, &f, &consumed), KTP_OK);
  EXPECT_EQ(ktp_parse_error(&f, &err), KTP_ERR_BOUNDS);

  ktp_text_poke poke{};
  for (uint16_t len : {uint16_t{KTP_MAX_BLOB}, uint16_t{KTP_MAX_BLOB + 1}}) {
    Bytes payload(20, 0);
    put_le(payload, len, 2);
    payload.resize(payload.size() + len, 0x90);
    put_le(payload, 0, 2);
    const Bytes b = frame_by_hand(KTP_TEXT_POKE, payload);
    ASSERT_EQ(decode(b, &f, &consumed), KTP_OK);
    EXPECT_EQ(ktp_parse_text_poke(&f, &poke), len > KTP_MAX_BLOB ? KTP_ERR_BOUNDS : KTP_OK);
  }

  std::vector<ktp_symbol> sym_slots(KTP_MAX_BATCH);
  ktp_state_symbols syms{0, sym_slots.data()};
  Bytes too_many;
  put_le(too_many, KTP_MAX_BATCH + 1, 4);
  const Bytes b1 = frame_by_hand(KTP_STATE_SYMBOLS, too_many);
  ASSERT_EQ(decode(b1, &f, &consumed), KTP_OK);
  EXPECT_EQ(ktp_parse_state_symbols(&f, &syms), KTP_ERR_BOUNDS);
  EXPECT_EQ(syms.count, 0u);

  std::vector<uint32_t> cpu_slots(KTP_MAX_CPUS);
  ktp_cpus cpus{0, cpu_slots.data()};
  Bytes too_many_cpus;
  put_le(too_many_cpus, KTP_MAX_CPUS + 1, 4);
  too_many_cpus.resize(4 + 4 * (KTP_MAX_CPUS + 1));
  const Bytes b2 = frame_by_hand(KTP_STATE_CPUS, too_many_cpus);
  ASSERT_EQ(decode(b2, &f, &consumed), KTP_OK);
  EXPECT_EQ(ktp_parse_state_cpus(&f, &cpus), KTP_ERR_BOUNDS);
}

TEST(KtprotoErrors, EncodersRefuseOversizedInputs) {
  Bytes buf(KTP_MAX_FRAME);
  const std::string long_name(KTP_MAX_STRING + 1, 'x');
  const ktp_error err{ktp_str{long_name.data(), static_cast<uint16_t>(long_name.size())}};
  EXPECT_EQ(ktp_encode_error(buf.data(), buf.size(), 0, &err), KTP_ERR_BOUNDS);

  const Bytes blob(KTP_MAX_BLOB + 1, 0xcc);
  const ktp_text_poke poke{0, 0, 0, static_cast<uint16_t>(blob.size()), blob.data(), 0, nullptr};
  EXPECT_EQ(ktp_encode_text_poke(buf.data(), buf.size(), 0, &poke), KTP_ERR_BOUNDS);

  std::vector<ktp_symbol> syms(KTP_MAX_BATCH + 1);
  const ktp_state_symbols too_many{KTP_MAX_BATCH + 1, syms.data()};
  EXPECT_EQ(ktp_encode_state_symbols(buf.data(), buf.size(), 0, &too_many), KTP_ERR_BOUNDS);
  std::vector<uint32_t> cpus(KTP_MAX_CPUS + 1);
  const ktp_cpus too_many_cpus{KTP_MAX_CPUS + 1, cpus.data()};
  EXPECT_EQ(ktp_encode_state_cpus(buf.data(), buf.size(), 0, &too_many_cpus), KTP_ERR_BOUNDS);

  // Every field within its limit, yet the batch is over KTP_MAX_PAYLOAD.
  const std::string max_name(KTP_MAX_STRING, 'n');
  for (auto& s : syms)
    s = ktp_symbol{1, 't', ktp_str{max_name.data(), KTP_MAX_STRING}, ktp_str{max_name.data(), KTP_MAX_STRING}};
  const ktp_state_symbols too_big{KTP_MAX_BATCH, syms.data()};
  EXPECT_EQ(ktp_encode_state_symbols(buf.data(), buf.size(), 0, &too_big), KTP_ERR_LENGTH);
}

TEST(KtprotoErrors, NeedMoreOnEveryPrefix) {
  const Bytes b = hello_frame();
  for (size_t len = 0; len < b.size(); len++) {
    ktp_frame f{};
    size_t consumed = 99;
    EXPECT_EQ(ktp_decode_frame(b.data(), len, &f, &consumed), KTP_NEED_MORE) << len;
    EXPECT_EQ(consumed, 0u);
  }
}

TEST(KtprotoErrors, EncodeIntoTooSmallBuffer) {
  const Bytes good = hello_frame();
  ktp_hello h{};
  h.cpu_count = 4;
  h.release = ktp_str{"6.1.0", 5};
  h.build_id = ktp_str{"abcd", 4};
  Bytes buf(good.size());
  for (size_t cap = 0; cap < good.size(); cap++)
    EXPECT_EQ(ktp_encode_hello(buf.data(), cap, 0, &h), KTP_ERR_SPACE) << cap;
  EXPECT_EQ(ktp_encode_hello(buf.data(), buf.size(), 0, &h), static_cast<long>(good.size()));
  EXPECT_EQ(buf, good);
}

TEST(KtprotoErrors, FindMagic) {
  const auto find = [](const std::string& s) {
    return ktp_find_magic(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_EQ(find(""), 0u);
  EXPECT_EQ(find("KTSB...."), 0u);
  EXPECT_EQ(find("xxKTSBxx"), 2u);
  EXPECT_EQ(find("xKTxKTSB"), 4u);
  EXPECT_EQ(find("xxxxxx"), 6u);
  // A partial magic at the end may be the start of the next frame.
  EXPECT_EQ(find("xxxxxK"), 5u);
  EXPECT_EQ(find("xxxxKT"), 4u);
  EXPECT_EQ(find("xxxKTS"), 3u);
  EXPECT_EQ(find("xxKTSx"), 6u);
}

// The receiver's loop from PROTOCOL.md: decode, and on an error skip
// `consumed` bytes, then scan to the next magic.
TEST(KtprotoErrors, ResyncRecoversEveryIntactFrame) {
  const Bytes good = hello_frame();
  Bytes corrupt = good;
  corrupt[30] ^= 0x40;
  Bytes stream = {'g', 'a', 'r', 'K', 'T', 'b', 'a', 'g', 'e'};
  for (const Bytes* part :
       std::initializer_list<const Bytes*>{&good, &corrupt, &good, &good, &corrupt, &corrupt, &good})
    stream.insert(stream.end(), part->begin(), part->end());
  stream.insert(stream.end(), good.begin(), good.begin() + 10);  // a frame still arriving

  size_t at = 0, ok = 0, errors = 0;
  for (;;) {
    ktp_frame f{};
    size_t consumed = 0;
    const int st = ktp_decode_frame(stream.data() + at, stream.size() - at, &f, &consumed);
    if (st == KTP_NEED_MORE) break;
    if (st == KTP_OK) {
      ok++;
      at += consumed;
      continue;
    }
    errors++;
    at += consumed;
    at += ktp_find_magic(stream.data() + at, stream.size() - at);
  }
  EXPECT_EQ(ok, 4u);
  EXPECT_GE(errors, 4u);  // the leading garbage and the three corrupt frames
  EXPECT_EQ(at, stream.size() - 10);
}

TEST(KtprotoErrors, EveryStatusHasItsOwnName) {
  std::set<std::string> names;
  for (int st = KTP_ERR_SPACE; st <= KTP_NEED_MORE; st++) {
    const std::string name = ktp_status_name(st);
    EXPECT_FALSE(name.empty());
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 11u);
  EXPECT_EQ(std::string(ktp_status_name(42)), "unknown ktproto status");
}

}  // namespace
