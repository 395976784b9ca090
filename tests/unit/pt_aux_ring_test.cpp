#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "kthost/pt/aux_ring.h"

namespace kt {
namespace {

// FAKE of the kernel's side of a perf mmap with an AUX area, for tests only
// (this machine has no Intel PT). It follows the kernel's protocol in
// non-overwrite mode: bytes are written, then *_head is published with a
// release store; it never writes over [tail, head); AUX data that does not
// fit is cut and its PERF_RECORD_AUX carries PERF_AUX_FLAG_TRUNCATED.
class FakeKernelPerfRing {
 public:
  FakeKernelPerfRing(uint64_t data_size, uint64_t aux_size)
      : header_(new perf_event_mmap_page()), data_(data_size), aux_(aux_size) {
    header_->data_size = data_size;
    header_->aux_size = aux_size;
  }

  PerfRingLayout layout() { return {header_.get(), data_.data(), data_.size(), aux_.data(), aux_.size()}; }
  perf_event_mmap_page& header() { return *header_; }

  // Writes trace bytes and the PERF_RECORD_AUX that announces them.
  // Returns how many bytes fit.
  uint64_t write_aux(const std::vector<uint8_t>& bytes, uint64_t extra_flags = 0) {
    uint64_t head = aux_head_, tail = load(header_->aux_tail);
    uint64_t room = aux_.size() - (head - tail);
    uint64_t n = std::min<uint64_t>(room, bytes.size());
    for (uint64_t i = 0; i < n; ++i) aux_[(head + i) & (aux_.size() - 1)] = bytes[i];
    aux_head_ = head + n;
    std::atomic_ref<__u64>(header_->aux_head).store(aux_head_, std::memory_order_release);
    uint64_t flags = extra_flags | (n < bytes.size() ? PERF_AUX_FLAG_TRUNCATED : 0);
    write_record(PERF_RECORD_AUX, {head, n, flags});
    return n;
  }

  // Writes one record of u64 fields; false when the data ring has no room.
  bool write_record(uint32_t type, const std::vector<uint64_t>& fields) {
    size_t size = sizeof(perf_event_header) + fields.size() * 8;
    perf_event_header h{type, 0, static_cast<uint16_t>(size)};
    std::array<uint8_t, sizeof h> head_bytes;
    std::memcpy(head_bytes.data(), &h, sizeof h);
    std::vector<uint8_t> rec(head_bytes.begin(), head_bytes.end());
    for (uint64_t f : fields)
      for (unsigned i = 0; i < 8; ++i) rec.push_back(static_cast<uint8_t>(f >> (8 * i)));
    return write_raw(rec);
  }

  // Raw bytes into the data ring, for malformed records.
  bool write_raw(const std::vector<uint8_t>& bytes) {
    uint64_t tail = load(header_->data_tail);
    if (data_.size() - (data_head_ - tail) < bytes.size()) return false;
    for (size_t i = 0; i < bytes.size(); ++i) data_[(data_head_ + i) & (data_.size() - 1)] = bytes[i];
    data_head_ += bytes.size();
    std::atomic_ref<__u64>(header_->data_head).store(data_head_, std::memory_order_release);
    return true;
  }

 private:
  static uint64_t load(__u64& v) { return std::atomic_ref<__u64>(v).load(std::memory_order_acquire); }
  std::unique_ptr<perf_event_mmap_page> header_;
  std::vector<uint8_t> data_;
  std::vector<uint8_t> aux_;
  uint64_t data_head_ = 0;
  uint64_t aux_head_ = 0;
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

struct Collector {
  std::vector<uint8_t> bytes;
  int calls = 0;
  AuxSink sink() {
    return [this](std::span<const uint8_t> chunk) {
      ++calls;
      bytes.insert(bytes.end(), chunk.begin(), chunk.end());
      return ok_status();
    };
  }
};

TEST(PtAuxRing, CopiesTraceAndCountsRecords) {
  FakeKernelPerfRing ring(4096, 4096);
  auto consumer = AuxRingConsumer::create(ring.layout());
  ASSERT_TRUE(consumer) << consumer.error().message;
  ring.write_record(PERF_RECORD_ITRACE_START, {0x0000007b0000007bull});
  auto trace = pattern(100, 1);
  ASSERT_EQ(ring.write_aux(trace), 100u);
  ring.write_record(PERF_RECORD_COMM + 0, {1, 2, 3});  // some other record: skipped
  Collector out;
  ASSERT_TRUE(consumer->drain(out.sink()));
  EXPECT_EQ(out.bytes, trace);
  const auto& s = consumer->stats();
  EXPECT_EQ(s.aux_bytes, 100u);
  EXPECT_EQ(s.aux_records, 1u);
  EXPECT_EQ(s.aux_record_bytes, 100u);
  EXPECT_EQ(s.itrace_starts, 1u);
  EXPECT_EQ(s.other_records, 1u);
  EXPECT_EQ(s.truncated + s.malformed_records, 0u);
  EXPECT_EQ(ring.header().aux_tail, 100u);
  EXPECT_EQ(ring.header().data_tail, ring.header().data_head);
  // Nothing new: nothing delivered.
  ASSERT_TRUE(consumer->drain(out.sink()));
  EXPECT_EQ(out.calls, 1);
}

TEST(PtAuxRing, BothRingsWrapAndEveryByteArrivesInOrder) {
  FakeKernelPerfRing ring(256, 64);  // 256 is not a multiple of 32-byte AUX records
  auto consumer = AuxRingConsumer::create(ring.layout());
  ASSERT_TRUE(consumer);
  std::vector<uint8_t> sent;
  Collector out;
  for (int round = 0; round < 200; ++round) {
    for (int k = 0; k < 1 + round % 3; ++k) {
      auto chunk = pattern(static_cast<size_t>(1 + (round * 13 + k * 5) % 20), static_cast<uint8_t>(round));
      ASSERT_EQ(ring.write_aux(chunk), chunk.size()) << "round " << round;
      sent.insert(sent.end(), chunk.begin(), chunk.end());
    }
    ASSERT_TRUE(consumer->drain(out.sink()));
  }
  EXPECT_EQ(out.bytes, sent);
  EXPECT_GT(out.calls, 200);  // some drains were split at the end of the ring
  EXPECT_EQ(consumer->stats().aux_bytes, sent.size());
  EXPECT_EQ(consumer->stats().aux_record_bytes, sent.size());
  EXPECT_EQ(consumer->stats().truncated, 0u);
  EXPECT_EQ(consumer->stats().malformed_records, 0u);
}

TEST(PtAuxRing, CountsTruncationFlagsAndLoss) {
  FakeKernelPerfRing ring(4096, 64);
  auto consumer = AuxRingConsumer::create(ring.layout());
  ASSERT_TRUE(consumer);
  EXPECT_EQ(ring.write_aux(pattern(50, 0)), 50u);
  EXPECT_EQ(ring.write_aux(pattern(50, 9)), 14u);  // full: cut and flagged
  ring.write_record(PERF_RECORD_AUX, {0, 0, PERF_AUX_FLAG_TRUNCATED});  // nothing fitted at all
  ring.write_record(PERF_RECORD_AUX, {64, 0, PERF_AUX_FLAG_PARTIAL | PERF_AUX_FLAG_COLLISION});
  ring.write_record(PERF_RECORD_AUX, {64, 0, PERF_AUX_FLAG_OVERWRITE | 0x0100});  // PMU format bits ignored
  ring.write_record(PERF_RECORD_LOST, {42, 7});
  ring.write_record(PERF_RECORD_LOST, {42, 3});
  Collector out;
  ASSERT_TRUE(consumer->drain(out.sink()));
  const auto& s = consumer->stats();
  EXPECT_EQ(s.aux_bytes, 64u);
  EXPECT_EQ(s.aux_records, 5u);
  EXPECT_EQ(s.truncated, 2u);
  EXPECT_EQ(s.partial, 1u);
  EXPECT_EQ(s.collision, 1u);
  EXPECT_EQ(s.overwrite, 1u);
  EXPECT_EQ(s.lost_records, 2u);
  EXPECT_EQ(s.lost_events, 10u);
  // The space is free again.
  EXPECT_EQ(ring.write_aux(pattern(64, 3)), 64u);
}

TEST(PtAuxRing, MalformedRecordSizesAreCountedNeverReadPast) {
  FakeKernelPerfRing ring(256, 64);
  auto consumer = AuxRingConsumer::create(ring.layout());
  ASSERT_TRUE(consumer);
  Collector out;

  // An AUX record too short for its fields: counted, skipped by its size.
  perf_event_header short_aux{PERF_RECORD_AUX, 0, 16};
  std::vector<uint8_t> raw(16, 0xee);
  std::memcpy(raw.data(), &short_aux, sizeof short_aux);
  ASSERT_TRUE(ring.write_raw(raw));
  ring.write_record(PERF_RECORD_ITRACE_START, {1});
  ASSERT_TRUE(consumer->drain(out.sink()));
  EXPECT_EQ(consumer->stats().malformed_records, 1u);
  EXPECT_EQ(consumer->stats().aux_records, 0u);
  EXPECT_EQ(consumer->stats().itrace_starts, 1u);

  // A size smaller than the header, or larger than what was published:
  // the next record's start is unknown.
  for (uint16_t bad_size : {uint16_t{0}, uint16_t{4}, uint16_t{0xfff8}}) {
    perf_event_header h{PERF_RECORD_AUX, 0, bad_size};
    std::vector<uint8_t> bytes(24, 0);
    std::memcpy(bytes.data(), &h, sizeof h);
    ASSERT_TRUE(ring.write_raw(bytes));
    ring.write_record(PERF_RECORD_ITRACE_START, {1});
    ASSERT_TRUE(consumer->drain(out.sink()));
  }
  // Each bad record was dropped with everything published after it.
  EXPECT_EQ(consumer->stats().malformed_records, 4u);
  EXPECT_EQ(consumer->stats().itrace_starts, 1u);
  EXPECT_EQ(consumer->stats().dropped_data_bytes, 3u * (24 + 16));
  EXPECT_EQ(ring.header().data_tail, ring.header().data_head);

  // Afterwards the ring works normally.
  ASSERT_EQ(ring.write_aux(pattern(10, 5)), 10u);
  ASSERT_TRUE(consumer->drain(out.sink()));
  EXPECT_EQ(consumer->stats().aux_records, 1u);
  EXPECT_EQ(out.bytes, pattern(10, 5));
}

TEST(PtAuxRing, HeadRunningAheadOrBackIsAnErrorAndResyncs) {
  FakeKernelPerfRing ring(256, 64);
  auto consumer = AuxRingConsumer::create(ring.layout());
  ASSERT_TRUE(consumer);
  Collector out;
  ring.header().aux_head = 65;  // more than one ring of unread data: impossible
  auto st = consumer->drain(out.sink());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::InvalidInput);
  EXPECT_NE(st.error().message.find("aux_head"), std::string::npos);
  EXPECT_TRUE(out.bytes.empty());
  EXPECT_EQ(ring.header().aux_tail, 65u);
  ring.header().aux_head = 10;  // behind the tail
  EXPECT_FALSE(consumer->drain(out.sink()));
  EXPECT_EQ(ring.header().aux_tail, 10u);

  ring.header().data_head = 1000;
  st = consumer->drain(out.sink());
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("data_head"), std::string::npos);
  EXPECT_EQ(ring.header().data_tail, 1000u);
  EXPECT_TRUE(out.bytes.empty());
}

TEST(PtAuxRing, SinkErrorLeavesUnacceptedBytesInTheRing) {
  FakeKernelPerfRing ring(4096, 64);
  auto consumer = AuxRingConsumer::create(ring.layout());
  ASSERT_TRUE(consumer);
  ring.write_aux(pattern(40, 0));
  Collector first;
  ASSERT_TRUE(consumer->drain(first.sink()));
  auto second_chunk = pattern(40, 1);  // wraps: 24 bytes at the end, 16 at the start
  ring.write_aux(second_chunk);
  int calls = 0;
  auto st = consumer->drain([&](std::span<const uint8_t>) -> Status {
    return ++calls == 2 ? Status(Error(ErrorCode::Io, "disk full")) : ok_status();
  });
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "disk full");
  EXPECT_EQ(ring.header().aux_tail, 64u);  // the first piece was taken
  Collector retry;
  ASSERT_TRUE(consumer->drain(retry.sink()));
  EXPECT_EQ(retry.bytes, std::vector<uint8_t>(second_chunk.begin() + 24, second_chunk.end()));
}

TEST(PtAuxRing, CreateRejectsImpossibleLayouts) {
  FakeKernelPerfRing ring(256, 64);
  PerfRingLayout layout = ring.layout();
  layout.aux_size = 96;
  EXPECT_FALSE(AuxRingConsumer::create(layout));
  layout = ring.layout();
  layout.data_size = 0;
  EXPECT_FALSE(AuxRingConsumer::create(layout));
  layout = ring.layout();
  layout.aux = nullptr;
  EXPECT_FALSE(AuxRingConsumer::create(layout));
}

}  // namespace
}  // namespace kt
