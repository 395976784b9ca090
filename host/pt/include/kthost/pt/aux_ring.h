// Consumer side of a perf mmap with an AUX area: the data ring (perf records)
// and the AUX ring (raw Intel PT bytes), as described in perf_event_open(2).
//
// Protocol, for both rings: the kernel publishes *_head after writing the
// bytes (we load it with acquire), we read [tail, head), then publish *_tail
// with a release store so the kernel may reuse the space. Heads and tails
// are free-running byte counts; the position in a ring is count mod size.
//
// The control page and the data ring are treated as untrusted: a record whose
// size is impossible, or a head that runs more than a ring ahead of the tail,
// is counted (or an error), never a read outside the mapping.
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <functional>
#include <span>

#include "kthost/common/result.h"

namespace kt {

// Where the pieces of one perf mmap are. The caller knows the sizes from its
// own mmap calls; the consumer does not trust data_size/aux_size in the page.
struct PerfRingLayout {
  perf_event_mmap_page* header = nullptr;  // the first page of the mapping
  uint8_t* data = nullptr;                 // data ring
  uint64_t data_size = 0;                  // a power of two
  uint8_t* aux = nullptr;                  // AUX ring
  uint64_t aux_size = 0;                   // a power of two
};

struct AuxRingStats {
  uint64_t aux_bytes = 0;       // trace bytes handed to the sink
  uint64_t aux_records = 0;     // PERF_RECORD_AUX
  uint64_t aux_record_bytes = 0;// sum of their aux_size
  uint64_t truncated = 0;       // PERF_AUX_FLAG_TRUNCATED: the AUX ring was full, trace was lost
  uint64_t overwrite = 0;       // PERF_AUX_FLAG_OVERWRITE
  uint64_t partial = 0;         // PERF_AUX_FLAG_PARTIAL: gaps (e.g. tracing blocked in VMX operation)
  uint64_t collision = 0;       // PERF_AUX_FLAG_COLLISION
  uint64_t lost_records = 0;    // PERF_RECORD_LOST records
  uint64_t lost_events = 0;     // sum of their 'lost' counts: data-ring records the kernel dropped
  uint64_t itrace_starts = 0;   // PERF_RECORD_ITRACE_START
  uint64_t other_records = 0;   // other record types, skipped
  uint64_t malformed_records = 0;  // impossible sizes; see drain()
  uint64_t dropped_data_bytes = 0; // data-ring bytes skipped after a malformed record
};

// Receives AUX bytes in order; called at most twice per drain (the ring wraps).
// An error stops the drain; bytes not yet accepted stay in the ring.
using AuxSink = std::function<Status(std::span<const uint8_t>)>;

class AuxRingConsumer {
 public:
  static constexpr uint32_t kMinAuxRecordSize = sizeof(perf_event_header) + 3 * sizeof(uint64_t);

  // InvalidArgument when a pointer is null or a size is not a power of two.
  static Result<AuxRingConsumer> create(const PerfRingLayout& layout);

  // Handles every complete record in the data ring, then hands AUX bytes
  // [aux_tail, aux_head) to `sink`, and publishes both tails.
  //  - A record smaller than its header, or larger than what the kernel
  //    published, cannot be skipped safely: it is counted in
  //    malformed_records and the rest of the published data is dropped
  //    (counted in dropped_data_bytes). A PERF_RECORD_AUX too short for its
  //    fields is counted and skipped by its size.
  //  - A head more than a ring ahead of the tail, or behind it, is an
  //    InvalidInput error; the tail is moved to the head so that the next
  //    drain starts clean.
  //  - A sink error is returned as is.
  Status drain(const AuxSink& sink);

  const AuxRingStats& stats() const { return stats_; }

 private:
  explicit AuxRingConsumer(const PerfRingLayout& layout) : ring_(layout) {}
  Status drain_data();
  Status drain_aux(const AuxSink& sink);
  void handle_record(const perf_event_header& header, uint64_t pos);
  // Copies len bytes at free-running position pos of the data ring, wrapping.
  void copy_data(uint64_t pos, void* out, size_t len) const;

  PerfRingLayout ring_;
  uint64_t data_tail_ = 0;
  uint64_t aux_tail_ = 0;
  AuxRingStats stats_;
};

}  // namespace kt
