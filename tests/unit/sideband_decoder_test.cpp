// SidebandDecoder against frames made with the shared codec: the stream is
// untrusted, so every kind of damage must be counted and survived.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kthost/sideband/decoder.h"
#include "kthost/sideband/event_log.h"
#include "ktproto.h"

namespace kt {
namespace {

class FrameWriter {
 public:
  std::vector<uint8_t> bytes;
  uint64_t seq = 0;

  void hello() {
    ktp_hello h{};
    h.cpu_count = 2;
    h.session = 0x1234;
    h.clock = {1000, 1u << 20, 20, 1};
    h.release = {"6.1.0-57-amd64", 14};
    put(ktp_encode_hello(buf_, sizeof buf_, seq++, &h));
  }
  void poke(uint64_t addr, uint64_t time = 5000) {
    uint8_t old_bytes[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00}, new_bytes[5] = {0xe9, 1, 2, 3, 4};
    ktp_text_poke p{time, 1, addr, 5, old_bytes, 5, new_bytes};
    put(ktp_encode_text_poke(buf_, sizeof buf_, seq++, &p));
  }
  void switches(uint64_t time, uint32_t cpu, std::vector<uint32_t> words) {
    ktp_task_switches m{time, cpu, static_cast<uint32_t>(words.size()), words.data()};
    put(ktp_encode_task_switches(buf_, sizeof buf_, seq++, &m));
  }
  void lost(uint64_t count) {
    ktp_lost l{6000, 0, KTP_LOST_PERF_RING, 0, count};
    put(ktp_encode_lost(buf_, sizeof buf_, seq++, &l));
  }
  void state(size_t nsyms) {
    ktp_state_begin b{100, KTP_STATE_START, static_cast<uint32_t>(nsyms), 1, 0};
    put(ktp_encode_state_begin(buf_, sizeof buf_, seq++, &b));
    std::vector<std::string> names;
    std::vector<ktp_symbol> syms;
    for (size_t i = 0; i < nsyms; ++i) names.push_back("sym" + std::to_string(i));
    for (size_t i = 0; i < nsyms; ++i)
      syms.push_back({0xffffffff81000000ull + i * 16, 'T', {names[i].data(), static_cast<uint16_t>(names[i].size())}, {"", 0}});
    for (size_t at = 0; at < nsyms; at += 500) {
      ktp_state_symbols s{static_cast<uint32_t>(std::min<size_t>(500, nsyms - at)), syms.data() + at};
      put(ktp_encode_state_symbols(big_.data(), big_.size(), seq++, &s), big_.data());
    }
    ktp_module m{0, {"dummy", 5}, 0xffffffffc0a00000ull, 0x1000, 0xffffffffc0a00000ull, 16384};
    put(ktp_encode_state_module(buf_, sizeof buf_, seq++, &m));
    uint32_t cpus[2] = {0, 1};
    ktp_cpus c{2, cpus};
    put(ktp_encode_state_cpus(buf_, sizeof buf_, seq++, &c));
    const ktp_state_end end{200};
    put(ktp_encode_state_end(buf_, sizeof buf_, seq++, &end));
  }

 private:
  void put(long n, const uint8_t* src = nullptr) {
    ASSERT_GT(n, 0) << ktp_status_name(static_cast<int>(n));
    if (!src) src = buf_;
    bytes.insert(bytes.end(), src, src + n);
  }
  uint8_t buf_[4096];
  std::vector<uint8_t> big_ = std::vector<uint8_t>(KTP_MAX_FRAME);
};

std::vector<SidebandEvent> decode(SidebandDecoder& d, const std::vector<uint8_t>& bytes, size_t chunk = 0) {
  std::vector<SidebandEvent> out;
  if (!chunk) chunk = bytes.size();
  for (size_t i = 0; i < bytes.size(); i += chunk) d.feed(bytes.data() + i, std::min(chunk, bytes.size() - i), &out);
  return out;
}

TEST(SidebandDecoder, DecodesEventsInOrderWhateverTheChunking) {
  FrameWriter w;
  w.hello();
  w.poke(0xffffffff81001000ull);
  w.lost(7);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{24}, size_t{0}}) {
    SidebandDecoder d;
    auto events = decode(d, w.bytes, chunk);
    ASSERT_EQ(events.size(), 3u) << "chunk " << chunk;
    const auto& hello = std::get<HelloEvent>(events[0].body);
    EXPECT_EQ(hello.release, "6.1.0-57-amd64");
    EXPECT_TRUE(hello.clock.valid);
    const auto& poke = std::get<TextPokeEvent>(events[1].body);
    EXPECT_EQ(poke.addr, 0xffffffff81001000ull);
    EXPECT_EQ(poke.old_bytes, (std::vector<uint8_t>{0x0f, 0x1f, 0x44, 0x00, 0x00}));
    EXPECT_EQ(poke.new_bytes, (std::vector<uint8_t>{0xe9, 1, 2, 3, 4}));
    EXPECT_EQ(events[1].cpu, 1u);
    EXPECT_EQ(events[1].time, 5000u);
    EXPECT_EQ(std::get<LostEvent>(events[2].body).count, 7u);
    EXPECT_EQ(d.stats().errors(), 0u);
    EXPECT_EQ(d.stats().frames_missing, 0u);
  }
}

TEST(SidebandDecoder, TaskSwitchesComeAsTimedPairsAndAnOddCountIsRefused) {
  FrameWriter w;
  w.switches(1'000'000, 1, {0, 42, 1500, 0, 4'000'000'000u, 7});
  w.switches(2'000'000, 0, {0, 42, 10});  // odd: not (time, tid) pairs
  SidebandDecoder d;
  auto events = decode(d, w.bytes);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].cpu, 1u);
  const auto& sw = std::get<TaskSwitchesEvent>(events[0].body).switches;
  ASSERT_EQ(sw.size(), 3u);
  EXPECT_EQ(sw[0].time, 1'000'000u);
  EXPECT_EQ(sw[0].next_tid, 42u);
  EXPECT_EQ(sw[1].time, 1'001'500u);
  EXPECT_EQ(sw[1].next_tid, 0u);
  EXPECT_EQ(sw[2].time, 4'001'000'000u);
  EXPECT_EQ(d.stats().bad_payload, 1u);
  ASSERT_FALSE(d.recent_errors().empty());
  EXPECT_NE(d.recent_errors().back().reason.find("odd count"), std::string::npos);
  EXPECT_NE(to_json(events[0]).find("\"switches\":[[1000000,42],[1001500,0],[4001000000,7]]"), std::string::npos)
      << to_json(events[0]);
}

TEST(SidebandDecoder, StateDumpIsAggregated) {
  FrameWriter w;
  w.hello();
  w.state(1500);
  SidebandDecoder d;
  auto events = decode(d, w.bytes, 4096);
  ASSERT_EQ(events.size(), 2u);
  const auto& dump = std::get<StateDumpEvent>(events[1].body);
  EXPECT_EQ(dump.symbols, 1500u);
  EXPECT_EQ(dump.modules, 1u);
  EXPECT_EQ(dump.cpus, 2u);
  ASSERT_TRUE(d.state().complete);
  EXPECT_EQ(d.state().symbols[1499].name, "sym1499");
  EXPECT_EQ(d.state().modules[0].name, "dummy");
  EXPECT_EQ(d.state().modules[0].text_addr, 0xffffffffc0a00000ull);
}

TEST(SidebandDecoder, GarbageBetweenFramesIsSkippedAndCounted) {
  FrameWriter w;
  w.hello();
  std::vector<uint8_t> stream = {'j', 'u', 'n', 'k', 'K', 'T'};  // includes a partial magic
  stream.insert(stream.end(), w.bytes.begin(), w.bytes.end());
  size_t mid = stream.size();
  w.bytes.clear();
  w.poke(0x1000);
  stream.insert(stream.end(), 100, 0xAA);
  stream.insert(stream.end(), w.bytes.begin(), w.bytes.end());
  SidebandDecoder d;
  auto events = decode(d, stream, 7);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_GT(d.stats().bad_magic, 0u);
  EXPECT_EQ(d.stats().skipped_bytes, 6u + 100u);
  (void)mid;
}

TEST(SidebandDecoder, CorruptFrameIsCountedAndTheNextOneStillDecodes) {
  FrameWriter w;
  w.hello();
  size_t poke_at = w.bytes.size();
  w.poke(0x1000);
  w.poke(0x2000);
  w.bytes[poke_at + KTP_HEADER_SIZE + 3] ^= 0x40;  // flip a payload bit of the first poke
  SidebandDecoder d;
  auto events = decode(d, w.bytes);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(std::get<TextPokeEvent>(events[1].body).addr, 0x2000u);
  EXPECT_EQ(d.stats().bad_crc, 1u);
  EXPECT_EQ(d.stats().frames_missing, 1u) << "the corrupt frame's sequence number is missing";
  ASSERT_FALSE(d.recent_errors().empty());
  EXPECT_EQ(d.recent_errors().front().offset, poke_at);
}

TEST(SidebandDecoder, OversizedLengthIsRejectedWithoutBuffering) {
  FrameWriter w;
  w.hello();
  size_t at = w.bytes.size();
  w.poke(0x1000);
  uint32_t huge = 0x7fffffff;
  std::memcpy(&w.bytes[at + 8], &huge, 4);
  w.poke(0x3000);
  SidebandDecoder d;
  auto events = decode(d, w.bytes);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(d.stats().bad_length, 1u);
  EXPECT_EQ(std::get<TextPokeEvent>(events[1].body).addr, 0x3000u);
}

TEST(SidebandDecoder, TruncatedFrameWaitsForMore) {
  FrameWriter w;
  w.hello();
  SidebandDecoder d;
  std::vector<SidebandEvent> out;
  d.feed(w.bytes.data(), w.bytes.size() - 1, &out);
  EXPECT_TRUE(out.empty());
  d.feed(w.bytes.data() + w.bytes.size() - 1, 1, &out);
  EXPECT_EQ(out.size(), 1u);
}

TEST(SidebandDecoder, OutOfOrderAndGapsAreReported) {
  FrameWriter w;
  w.hello();
  w.poke(0x1000);
  w.seq = 10;
  w.poke(0x2000);
  w.seq = 5;
  w.poke(0x3000);
  SidebandDecoder d;
  auto events = decode(d, w.bytes);
  EXPECT_EQ(events.size(), 4u);
  EXPECT_EQ(d.stats().seq_gaps, 1u);
  EXPECT_EQ(d.stats().frames_missing, 8u);
  EXPECT_EQ(d.stats().out_of_order, 1u);
}

TEST(SidebandDecoder, OtherProtocolVersionIsAClearError) {
  FrameWriter w;
  w.hello();
  w.bytes[4] = 7;  // version byte
  SidebandDecoder d;
  auto events = decode(d, w.bytes);
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(d.version_mismatch());
  EXPECT_NE(d.version_error().find("v7"), std::string::npos) << d.version_error();
  EXPECT_NE(d.version_error().find("v1"), std::string::npos);
}

TEST(EventLog, CountsKindsAndLosses) {
  FrameWriter w;
  w.hello();
  w.poke(0x1000, 100);
  w.poke(0x2000, 200);
  w.lost(3);
  w.lost(4);
  SidebandDecoder d;
  EventLog log;
  log.append(decode(d, w.bytes));
  EXPECT_EQ(log.size(), 5u);
  EXPECT_EQ(log.count("text_poke"), 2u);
  EXPECT_EQ(log.lost(KTP_LOST_PERF_RING), 7u);
  EXPECT_EQ(log.between(150, 250).size(), 1u);
  EXPECT_EQ(log.events()[4].index, 4u);
  EventLog tiny(2);
  SidebandDecoder d2;
  tiny.append(decode(d2, w.bytes));
  EXPECT_EQ(tiny.size(), 2u);
  EXPECT_EQ(tiny.dropped(), 3u);
}

TEST(GuestClock, PerfTimeToTscInvertsTheKernelsConversion) {
  // The kernel computes time = time_zero + (tsc * mult) >> shift.
  GuestClock c{1'000'000, 0x1a2b3c4d, 31, true};
  for (uint64_t tsc : {uint64_t{0}, uint64_t{123456789}, uint64_t{987654321012ull}}) {
    unsigned __int128 prod = static_cast<unsigned __int128>(tsc) * c.time_mult;
    uint64_t t = c.time_zero + static_cast<uint64_t>(prod >> c.time_shift);
    auto back = c.to_tsc(t);
    ASSERT_TRUE(back);
    // One nanosecond of perf time spans 2^shift/mult TSC ticks: that is the
    // resolution of the inverse. Forward again, it must land on the same ns.
    uint64_t ticks_per_ns = (uint64_t{1} << c.time_shift) / c.time_mult + 1;
    EXPECT_LE(*back > tsc ? *back - tsc : tsc - *back, ticks_per_ns) << tsc;
    unsigned __int128 again = static_cast<unsigned __int128>(*back) * c.time_mult;
    uint64_t t2 = c.time_zero + static_cast<uint64_t>(again >> c.time_shift);
    EXPECT_LE(t > t2 ? t - t2 : t2 - t, 1u) << tsc;
  }
  EXPECT_FALSE(GuestClock{}.to_tsc(5));
  // time_zero near 2^64 (as the kernel publishes it after a while): wraps.
  GuestClock neg{~uint64_t{0} - 999, 1u << 10, 10, true};
  ASSERT_TRUE(neg.to_tsc(5000));
  EXPECT_EQ(*neg.to_tsc(5000), 6000u);
}

}  // namespace
}  // namespace kt
