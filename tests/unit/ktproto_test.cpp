// The sideband codec: round trips, the golden frame from PROTOCOL.md, and one
// test per error status. Frames for the error cases are built by hand (header
// + CRC) rather than with the encoders, so the tests also pin the wire layout.
#include "ktproto.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Bytes = std::vector<uint8_t>;

ktp_str str(std::string_view s) { return ktp_str{s.data(), static_cast<uint16_t>(s.size())}; }
std::string_view view(ktp_str s) { return {s.data, s.len}; }

// Runs an encoder into a KTP_MAX_FRAME buffer and returns the frame bytes.
template <typename Encode>
Bytes encode(Encode&& fn) {
  Bytes buf(KTP_MAX_FRAME);
  const long n = fn(buf.data(), buf.size());
  EXPECT_GT(n, 0) << ktp_status_name(static_cast<int>(n));
  buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return buf;
}

ktp_frame decode_ok(const Bytes& b) {
  ktp_frame f{};
  size_t consumed = 0;
  EXPECT_EQ(ktp_decode_frame(b.data(), b.size(), &f, &consumed), KTP_OK);
  EXPECT_EQ(consumed, b.size());
  return f;
}

void put_le(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; i++) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// The framing as PROTOCOL.md specifies it, independently of the encoders.
Bytes frame_by_hand(uint8_t type, const Bytes& payload, uint64_t seq = 7, uint8_t version = KTP_VERSION) {
  Bytes b = {'K', 'T', 'S', 'B', version, type, 0, 0};
  put_le(b, payload.size(), 4);
  put_le(b, 0, 4);
  put_le(b, seq, 8);
  b.insert(b.end(), payload.begin(), payload.end());
  const uint32_t crc = ktp_crc32c(0, b.data(), b.size());
  for (int i = 0; i < 4; i++) b[12 + static_cast<size_t>(i)] = static_cast<uint8_t>(crc >> (8 * i));
  return b;
}

Bytes payload_of(const Bytes& frame) { return Bytes(frame.begin() + KTP_HEADER_SIZE, frame.end()); }

uint32_t crc_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

ktp_hello sample_hello() {
  ktp_hello h{};
  h.proto_minor = 3;
  h.cpu_count = 64;
  h.boot_time_ns = 0x1122334455667788ULL;
  h.session = 0xdeadbeefcafef00dULL;
  h.clock = ktp_clock{0x0102030405060708ULL, 0x9abcdef0u, 31, 1};
  h.release = str("6.1.0-18-amd64");
  h.build_id = str("0123456789abcdef0123456789abcdef01234567");
  return h;
}

// ---------------------------------------------------------------- CRC

TEST(KtprotoCrc, KnownVector) { EXPECT_EQ(ktp_crc32c(0, "123456789", 9), 0xE3069283u); }

TEST(KtprotoCrc, EmptyIsZeroAndCallsChain) {
  EXPECT_EQ(ktp_crc32c(0, "", 0), 0u);
  const std::string s = "the quick brown fox jumps over the lazy dog, twice over";
  for (size_t cut = 0; cut <= s.size(); cut++)
    EXPECT_EQ(ktp_crc32c(ktp_crc32c(0, s.data(), cut), s.data() + cut, s.size() - cut),
              ktp_crc32c(0, s.data(), s.size()));
}

TEST(KtprotoCrc, TablesMatchBitwiseDefinitionAtEveryAlignment) {
  Bytes data(300);
  uint32_t x = 12345;
  for (auto& b : data) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t off = 0; off < 9; off++)
    for (size_t len = 0; len + off <= data.size(); len += 7)
      ASSERT_EQ(ktp_crc32c(0, data.data() + off, len), crc_bitwise(data.data() + off, len)) << off << "+" << len;
}

// ---------------------------------------------------------------- golden frame

TEST(KtprotoGolden, HelloAckBytesMatchSpec) {
  // PROTOCOL.md, "Worked example": HELLO_ACK, seq 0, proto_minor 0, flags GUARD_ENABLED.
  const Bytes golden = {0x4b, 0x54, 0x53, 0x42, 0x01, 0x02, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0xf2, 0xa4, 0x25,
                        0x51, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00};
  const ktp_hello_ack ack{0, KTP_ACK_GUARD_ENABLED};
  EXPECT_EQ(encode([&](uint8_t* b, size_t c) { return ktp_encode_hello_ack(b, c, 0, &ack); }), golden);
  EXPECT_EQ(frame_by_hand(KTP_HELLO_ACK, payload_of(golden), 0), golden);
  const ktp_frame f = decode_ok(golden);
  ktp_hello_ack out{};
  ASSERT_EQ(ktp_parse_hello_ack(&f, &out), KTP_OK);
  EXPECT_EQ(out.proto_minor, 0);
  EXPECT_EQ(out.flags, KTP_ACK_GUARD_ENABLED);
}

// ---------------------------------------------------------------- round trips

TEST(KtprotoRoundTrip, Hello) {
  const ktp_hello in = sample_hello();
  const Bytes b = encode([&](uint8_t* p, size_t c) { return ktp_encode_hello(p, c, 0, &in); });
  const ktp_frame f = decode_ok(b);
  EXPECT_EQ(f.type, KTP_HELLO);
  EXPECT_EQ(f.seq, 0u);
  ktp_hello out{};
  ASSERT_EQ(ktp_parse_hello(&f, &out), KTP_OK);
  EXPECT_EQ(out.proto_minor, in.proto_minor);
  EXPECT_EQ(out.cpu_count, in.cpu_count);
  EXPECT_EQ(out.boot_time_ns, in.boot_time_ns);
  EXPECT_EQ(out.session, in.session);
  EXPECT_EQ(out.clock.time_zero, in.clock.time_zero);
  EXPECT_EQ(out.clock.time_mult, in.clock.time_mult);
  EXPECT_EQ(out.clock.time_shift, in.clock.time_shift);
  EXPECT_EQ(out.clock.cap_user_time_zero, in.clock.cap_user_time_zero);
  EXPECT_EQ(view(out.release), view(in.release));
  EXPECT_EQ(view(out.build_id), view(in.build_id));
  // Strings are views into the frame, not copies.
  EXPECT_GE(reinterpret_cast<const uint8_t*>(out.release.data), b.data());
  EXPECT_LT(reinterpret_cast<const uint8_t*>(out.release.data), b.data() + b.size());
}

TEST(KtprotoRoundTrip, HelloAckStateBeginStateEnd) {
  const ktp_hello_ack ack{9, 0xfffffffeu};
  const Bytes a = encode([&](uint8_t* p, size_t c) { return ktp_encode_hello_ack(p, c, 1, &ack); });
  ktp_hello_ack ack_out{};
  const ktp_frame fa = decode_ok(a);
  ASSERT_EQ(ktp_parse_hello_ack(&fa, &ack_out), KTP_OK);
  EXPECT_EQ(fa.seq, 1u);
  EXPECT_EQ(ack_out.proto_minor, 9);
  EXPECT_EQ(ack_out.flags, 0xfffffffeu);

  const ktp_state_begin sb{0xffffffffffffffffULL, KTP_STATE_RECONNECT, 150000, 120, 33};
  const Bytes b = encode([&](uint8_t* p, size_t c) { return ktp_encode_state_begin(p, c, 2, &sb); });
  ktp_state_begin sb_out{};
  const ktp_frame fb = decode_ok(b);
  ASSERT_EQ(ktp_parse_state_begin(&fb, &sb_out), KTP_OK);
  EXPECT_EQ(sb_out.time, sb.time);
  EXPECT_EQ(sb_out.reason, sb.reason);
  EXPECT_EQ(sb_out.symbols, sb.symbols);
  EXPECT_EQ(sb_out.modules, sb.modules);
  EXPECT_EQ(sb_out.bpf_progs, sb.bpf_progs);

  const ktp_state_end end{0x123456789ULL};
  const Bytes e = encode([&](uint8_t* p, size_t c) { return ktp_encode_state_end(p, c, 3, &end); });
  ktp_state_end end_out{};
  const ktp_frame fe = decode_ok(e);
  ASSERT_EQ(ktp_parse_state_end(&fe, &end_out), KTP_OK);
  EXPECT_EQ(end_out.time, 0x123456789ULL);
}

TEST(KtprotoRoundTrip, StateSymbols) {
  ktp_symbol in[3] = {{0xffffffff81000000ULL, 'T', str("_stext"), str("")},
                      {0xffffffffc0a01000ULL, 't', str("e1000_xmit_frame"), str("e1000")},
                      {0xffffffffa0000800ULL, 't', str("bpf_prog_6deef7357e7b4530_sd_fw_ingress"), str("bpf")}};
  const ktp_state_symbols m{3, in};
  const Bytes b = encode([&](uint8_t* p, size_t c) { return ktp_encode_state_symbols(p, c, 4, &m); });
  std::vector<ktp_symbol> slots(KTP_MAX_BATCH);
  ktp_state_symbols out{0, slots.data()};
  const ktp_frame f = decode_ok(b);
  ASSERT_EQ(ktp_parse_state_symbols(&f, &out), KTP_OK);
  ASSERT_EQ(out.count, 3u);
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(slots[i].addr, in[i].addr);
    EXPECT_EQ(slots[i].type, in[i].type);
    EXPECT_EQ(view(slots[i].name), view(in[i].name));
    EXPECT_EQ(view(slots[i].module), view(in[i].module));
  }
}

TEST(KtprotoRoundTrip, ModuleInAllThreeTypes) {
  const ktp_module in{77, str("kvm_intel"), 0xffffffffc0400000ULL, 0x5a000, 0xffffffffc03f0000ULL, 0x80000};
  for (uint8_t type : {uint8_t{KTP_STATE_MODULE}, uint8_t{KTP_MODULE_LOAD}, uint8_t{KTP_MODULE_UNLOAD}}) {
    ktp_message msg{};
    msg.type = type;
    msg.u.module = in;
    const Bytes b = encode([&](uint8_t* p, size_t c) { return ktp_encode_message(p, c, 5, &msg); });
    const ktp_frame f = decode_ok(b);
    EXPECT_EQ(f.type, type);
    ktp_message parsed{};
    auto storage = std::make_unique<ktp_message_storage>();
    ASSERT_EQ(ktp_parse_message(&f, &parsed, storage.get()), KTP_OK);
    EXPECT_EQ(parsed.type, type);
    const ktp_module& out = parsed.u.module;
    EXPECT_EQ(out.time, in.time);
    EXPECT_EQ(view(out.name), "kvm_intel");
    EXPECT_EQ(out.text_addr, in.text_addr);
    EXPECT_EQ(out.text_size, in.text_size);
    EXPECT_EQ(out.core_addr, in.core_addr);
    EXPECT_EQ(out.core_size, in.core_size);
  }
  // Each message's parser takes that message only.
  const Bytes load = encode([&](uint8_t* p, size_t c) { return ktp_encode_module_load(p, c, 0, &in); });
  const ktp_frame fl = decode_ok(load);
  ktp_module out{};
  EXPECT_EQ(ktp_parse_module_unload(&fl, &out), KTP_ERR_TYPE);
  EXPECT_EQ(ktp_parse_module_load(&fl, &out), KTP_OK);
  ktp_message unknown{};
  unknown.type = 0;
  uint8_t buf[256];
  EXPECT_EQ(ktp_encode_message(buf, sizeof buf, 0, &unknown), KTP_ERR_TYPE);
}

TEST(KtprotoRoundTrip, BpfProgAndCpus) {
  const ktp_bpf_prog in{42, 26, {1, 2, 3, 4, 5, 6, 7, 0xff}, str("sd_fw_ingress"), 0xffffffffa0001000ULL, 1234};
  const Bytes b = encode([&](uint8_t* p, size_t c) { return ktp_encode_state_bpf(p, c, 6, &in); });
  const ktp_frame f = decode_ok(b);
  ktp_bpf_prog out{};
  ASSERT_EQ(ktp_parse_state_bpf(&f, &out), KTP_OK);
  EXPECT_EQ(out.id, 42u);
  EXPECT_EQ(out.prog_type, 26u);
  EXPECT_EQ(std::memcmp(out.tag, in.tag, 8), 0);
  EXPECT_EQ(view(out.name), "sd_fw_ingress");
  EXPECT_EQ(out.jited_addr, in.jited_addr);
  EXPECT_EQ(out.jited_len, 1234u);

  std::vector<uint32_t> cpus(KTP_MAX_CPUS);
  for (uint32_t i = 0; i < KTP_MAX_CPUS; i++) cpus[i] = i * 3 + 1;
  const ktp_cpus all{KTP_MAX_CPUS, cpus.data()};
  const Bytes c = encode([&](uint8_t* p, size_t cap) { return ktp_encode_state_cpus(p, cap, 7, &all); });
  std::vector<uint32_t> slots(KTP_MAX_CPUS);
  ktp_cpus cpus_out{0, slots.data()};
  const ktp_frame fc = decode_ok(c);
  ASSERT_EQ(ktp_parse_state_cpus(&fc, &cpus_out), KTP_OK);
  EXPECT_EQ(cpus_out.count, KTP_MAX_CPUS);
  EXPECT_EQ(slots, cpus);
}

TEST(KtprotoRoundTrip, LiveEvents) {
  const ktp_ksymbol ks{100, 3, 0xffffffffa0002000ULL, 4096, 1, 1, str("bpf_prog_abc_f")};
  const Bytes b1 = encode([&](uint8_t* p, size_t c) { return ktp_encode_ksymbol(p, c, 8, &ks); });
  const ktp_frame f1 = decode_ok(b1);
  ktp_ksymbol ks_out{};
  ASSERT_EQ(ktp_parse_ksymbol(&f1, &ks_out), KTP_OK);
  EXPECT_EQ(ks_out.time, 100u);
  EXPECT_EQ(ks_out.cpu, 3u);
  EXPECT_EQ(ks_out.addr, ks.addr);
  EXPECT_EQ(ks_out.len, 4096u);
  EXPECT_EQ(ks_out.ksym_type, 1);
  EXPECT_EQ(ks_out.flags, 1);
  EXPECT_EQ(view(ks_out.name), "bpf_prog_abc_f");

  const ktp_bpf_event be{101, 4, 2, 0x8001, 42, {9, 8, 7, 6, 5, 4, 3, 2}};
  const Bytes b2 = encode([&](uint8_t* p, size_t c) { return ktp_encode_bpf_event(p, c, 9, &be); });
  const ktp_frame f2 = decode_ok(b2);
  ktp_bpf_event be_out{};
  ASSERT_EQ(ktp_parse_bpf_event(&f2, &be_out), KTP_OK);
  EXPECT_EQ(be_out.time, 101u);
  EXPECT_EQ(be_out.cpu, 4u);
  EXPECT_EQ(be_out.type, 2);
  EXPECT_EQ(be_out.flags, 0x8001);
  EXPECT_EQ(be_out.id, 42u);
  EXPECT_EQ(std::memcmp(be_out.tag, be.tag, 8), 0);

  const uint8_t old_bytes[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
  const uint8_t new_bytes[5] = {0xe8, 0x10, 0x20, 0x30, 0x40};
  const ktp_text_poke tp{102, 5, 0xffffffff81234567ULL, 5, old_bytes, 5, new_bytes};
  const Bytes b3 = encode([&](uint8_t* p, size_t c) { return ktp_encode_text_poke(p, c, 10, &tp); });
  const ktp_frame f3 = decode_ok(b3);
  ktp_text_poke tp_out{};
  ASSERT_EQ(ktp_parse_text_poke(&f3, &tp_out), KTP_OK);
  EXPECT_EQ(tp_out.time, 102u);
  EXPECT_EQ(tp_out.cpu, 5u);
  EXPECT_EQ(tp_out.addr, tp.addr);
  ASSERT_EQ(tp_out.old_len, 5);
  ASSERT_EQ(tp_out.new_len, 5);
  EXPECT_EQ(std::memcmp(tp_out.old_bytes, old_bytes, 5), 0);
  EXPECT_EQ(std::memcmp(tp_out.new_bytes, new_bytes, 5), 0);

  const ktp_lost lo{103, UINT32_MAX, KTP_LOST_QUEUE, KTP_TEXT_POKE, 1ULL << 40};
  const Bytes b4 = encode([&](uint8_t* p, size_t c) { return ktp_encode_lost(p, c, 11, &lo); });
  const ktp_frame f4 = decode_ok(b4);
  ktp_lost lo_out{};
  ASSERT_EQ(ktp_parse_lost(&f4, &lo_out), KTP_OK);
  EXPECT_EQ(lo_out.time, 103u);
  EXPECT_EQ(lo_out.cpu, UINT32_MAX);
  EXPECT_EQ(lo_out.kind, static_cast<uint32_t>(KTP_LOST_QUEUE));
  EXPECT_EQ(lo_out.record_type, static_cast<uint32_t>(KTP_TEXT_POKE));
  EXPECT_EQ(lo_out.count, 1ULL << 40);
}

TEST(KtprotoRoundTrip, GuardHeartbeatClockError) {
  const ktp_guard_notice gn{104, 6, 555, 0xffffffffa0003000ULL, 0xffffffffa0004000ULL, 1, 0x12345008ULL};
  const Bytes b1 = encode([&](uint8_t* p, size_t c) { return ktp_encode_guard_notice(p, c, 12, &gn); });
  const ktp_frame f1 = decode_ok(b1);
  ktp_guard_notice gn_out{};
  ASSERT_EQ(ktp_parse_guard_notice(&f1, &gn_out), KTP_OK);
  EXPECT_EQ(gn_out.time, 104u);
  EXPECT_EQ(gn_out.cpu, 6u);
  EXPECT_EQ(gn_out.id, 555u);
  EXPECT_EQ(gn_out.start, gn.start);
  EXPECT_EQ(gn_out.end, gn.end);
  EXPECT_EQ(gn_out.kind, 1u);
  EXPECT_EQ(gn_out.ack_addr, 0x12345008ULL);

  const ktp_guard_ack ga{555, 1};
  const Bytes b2 = encode([&](uint8_t* p, size_t c) { return ktp_encode_guard_ack(p, c, 13, &ga); });
  const ktp_frame f2 = decode_ok(b2);
  ktp_guard_ack ga_out{};
  ASSERT_EQ(ktp_parse_guard_ack(&f2, &ga_out), KTP_OK);
  EXPECT_EQ(ga_out.id, 555u);
  EXPECT_EQ(ga_out.status, 1u);

  const ktp_heartbeat hb{105, 1, 2, 3, 4, 5};
  const Bytes b3 = encode([&](uint8_t* p, size_t c) { return ktp_encode_heartbeat(p, c, 14, &hb); });
  const ktp_frame f3 = decode_ok(b3);
  ktp_heartbeat hb_out{};
  ASSERT_EQ(ktp_parse_heartbeat(&f3, &hb_out), KTP_OK);
  EXPECT_EQ(hb_out.time, 105u);
  EXPECT_EQ(hb_out.frames_sent, 1u);
  EXPECT_EQ(hb_out.perf_records, 2u);
  EXPECT_EQ(hb_out.text_pokes, 3u);
  EXPECT_EQ(hb_out.lost_records, 4u);
  EXPECT_EQ(hb_out.queue_dropped, 5u);

  const ktp_clock_change ck_in{106, {0xabcdef, 123456789, 10, 0}};
  const Bytes b4 = encode([&](uint8_t* p, size_t c) { return ktp_encode_clock(p, c, 15, &ck_in); });
  const ktp_frame f4 = decode_ok(b4);
  ktp_clock_change change{};
  ASSERT_EQ(ktp_parse_clock(&f4, &change), KTP_OK);
  EXPECT_EQ(change.time, 106u);
  const ktp_clock& ck_out = change.clock;
  EXPECT_EQ(ck_out.time_zero, 0xabcdefu);
  EXPECT_EQ(ck_out.time_mult, 123456789u);
  EXPECT_EQ(ck_out.time_shift, 10);
  EXPECT_EQ(ck_out.cap_user_time_zero, 0);

  const ktp_error er{str("protocol version 2 not supported (host speaks 1)")};
  const Bytes b5 = encode([&](uint8_t* p, size_t c) { return ktp_encode_error(p, c, 16, &er); });
  const ktp_frame f5 = decode_ok(b5);
  EXPECT_EQ(f5.seq, 16u);
  ktp_error er_out{};
  ASSERT_EQ(ktp_parse_error(&f5, &er_out), KTP_OK);
  EXPECT_EQ(view(er_out.message), view(er.message));
}

}  // namespace
