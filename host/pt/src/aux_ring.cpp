#include "kthost/pt/aux_ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

namespace kt {
namespace {

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint64_t load_acquire(__u64& field) { return std::atomic_ref<__u64>(field).load(std::memory_order_acquire); }
uint64_t load_relaxed(__u64& field) { return std::atomic_ref<__u64>(field).load(std::memory_order_relaxed); }
// Release: every read of ring bytes before this store happens before the
// kernel sees the space as free (the kernel's smp_mb() pairs with it).
void store_release(__u64& field, uint64_t v) { std::atomic_ref<__u64>(field).store(v, std::memory_order_release); }

// Record types this consumer reads (linux/perf_event.h).
constexpr uint32_t kRecordLost = PERF_RECORD_LOST;
constexpr uint32_t kRecordAux = PERF_RECORD_AUX;
constexpr uint32_t kRecordItraceStart = PERF_RECORD_ITRACE_START;

}  // namespace

Result<AuxRingConsumer> AuxRingConsumer::create(const PerfRingLayout& layout) {
  if (!layout.header || !layout.data || !layout.aux)
    return Error(ErrorCode::InvalidArgument, "perf ring layout: null header, data or aux pointer");
  if (!power_of_two(layout.data_size))
    return Error(ErrorCode::InvalidArgument, "perf ring layout: data size " + std::to_string(layout.data_size) +
                                                 " is not a power of two");
  if (!power_of_two(layout.aux_size))
    return Error(ErrorCode::InvalidArgument, "perf ring layout: aux size " + std::to_string(layout.aux_size) +
                                                 " is not a power of two");
  AuxRingConsumer consumer(layout);
  // Start from whatever the tails say (zero on a fresh mapping).
  consumer.data_tail_ = load_relaxed(layout.header->data_tail);
  consumer.aux_tail_ = load_relaxed(layout.header->aux_tail);
  return consumer;
}

Status AuxRingConsumer::drain(const AuxSink& sink) {
  Status data = drain_data();
  KT_TRY(drain_aux(sink));
  return data;
}

void AuxRingConsumer::copy_data(uint64_t pos, void* out, size_t len) const {
  uint64_t offset = pos & (ring_.data_size - 1);
  size_t first = static_cast<size_t>(std::min<uint64_t>(len, ring_.data_size - offset));
  std::memcpy(out, ring_.data + offset, first);
  if (len > first) std::memcpy(static_cast<uint8_t*>(out) + first, ring_.data, len - first);
}

Status AuxRingConsumer::drain_data() {
  uint64_t head = load_acquire(ring_.header->data_head);
  uint64_t available = head - data_tail_;
  if (head < data_tail_ || available > ring_.data_size) {
    std::string why = "perf data ring: data_head " + std::to_string(head) + " is " +
                      (head < data_tail_ ? "behind" : "more than a ring ahead of") + " data_tail " +
                      std::to_string(data_tail_);
    data_tail_ = head;
    store_release(ring_.header->data_tail, data_tail_);
    return Error(ErrorCode::InvalidInput, why);
  }
  while (head - data_tail_ >= sizeof(perf_event_header)) {
    perf_event_header header;
    copy_data(data_tail_, &header, sizeof header);
    uint64_t left = head - data_tail_;
    if (header.size < sizeof header || header.size > left) {
      // The next record's start is unknowable: drop what was published.
      ++stats_.malformed_records;
      stats_.dropped_data_bytes += left;
      data_tail_ = head;
      break;
    }
    handle_record(header, data_tail_);
    data_tail_ += header.size;
  }
  store_release(ring_.header->data_tail, data_tail_);
  return ok_status();
}

void AuxRingConsumer::handle_record(const perf_event_header& header, uint64_t pos) {
  // Fields after the header; at most three u64 are read, all within header.size.
  uint64_t fields[3] = {0, 0, 0};
  switch (header.type) {
    case kRecordAux: {
      if (header.size < kMinAuxRecordSize) {
        ++stats_.malformed_records;
        return;
      }
      copy_data(pos + sizeof header, fields, sizeof fields);
      uint64_t size = fields[1], flags = fields[2];
      ++stats_.aux_records;
      stats_.aux_record_bytes += size;
      if (flags & PERF_AUX_FLAG_TRUNCATED) ++stats_.truncated;
      if (flags & PERF_AUX_FLAG_OVERWRITE) ++stats_.overwrite;
      if (flags & PERF_AUX_FLAG_PARTIAL) ++stats_.partial;
      if (flags & PERF_AUX_FLAG_COLLISION) ++stats_.collision;
      return;
    }
    case kRecordLost: {
      if (header.size < sizeof header + 2 * sizeof(uint64_t)) {
        ++stats_.malformed_records;
        return;
      }
      copy_data(pos + sizeof header, fields, 2 * sizeof(uint64_t));
      ++stats_.lost_records;
      stats_.lost_events += fields[1];
      return;
    }
    case kRecordItraceStart:
      ++stats_.itrace_starts;
      return;
    default:
      ++stats_.other_records;
      return;
  }
}

Status AuxRingConsumer::drain_aux(const AuxSink& sink) {
  uint64_t head = load_acquire(ring_.header->aux_head);
  if (head < aux_tail_ || head - aux_tail_ > ring_.aux_size) {
    std::string why = "perf aux ring: aux_head " + std::to_string(head) + " is " +
                      (head < aux_tail_ ? "behind" : "more than a ring ahead of") + " aux_tail " +
                      std::to_string(aux_tail_);
    aux_tail_ = head;
    store_release(ring_.header->aux_tail, aux_tail_);
    return Error(ErrorCode::InvalidInput, why);
  }
  while (aux_tail_ != head) {
    uint64_t offset = aux_tail_ & (ring_.aux_size - 1);
    uint64_t len = std::min(head - aux_tail_, ring_.aux_size - offset);
    Status accepted = sink(std::span<const uint8_t>(ring_.aux + offset, static_cast<size_t>(len)));
    if (!accepted) {
      store_release(ring_.header->aux_tail, aux_tail_);
      return accepted;
    }
    aux_tail_ += len;
    stats_.aux_bytes += len;
  }
  store_release(ring_.header->aux_tail, aux_tail_);
  return ok_status();
}

}  // namespace kt
