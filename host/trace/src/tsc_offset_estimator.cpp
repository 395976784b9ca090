#include "kthost/trace/tsc_offset_estimator.h"

namespace kt {

TscOffsetEstimator TscOffsetEstimator::exact(int64_t pt_minus_guest) {
  TscOffsetEstimator e;
  e.mode_ = Mode::Exact;
  e.offset_ = pt_minus_guest;
  return e;
}

TscOffsetEstimator TscOffsetEstimator::arrival_bound() {
  TscOffsetEstimator e;
  e.mode_ = Mode::ArrivalBound;
  return e;
}

void TscOffsetEstimator::on_hello(const GuestClock& clock) {
  clock_ = clock;
  if (mode_ == Mode::ArrivalBound) offset_.reset();  // a new guest clock session
}

void TscOffsetEstimator::on_event(uint64_t perf_time, uint64_t received_tsc) {
  if (mode_ != Mode::ArrivalBound || !perf_time || !clock_.valid) return;
  auto guest_tsc = clock_.to_tsc(perf_time);
  if (!guest_tsc) return;
  // Wrapping difference: both are 64-bit counters on the same timeline.
  auto bound = static_cast<int64_t>(received_tsc - *guest_tsc);
  if (!offset_ || bound < *offset_) offset_ = bound;
}

BundleClock TscOffsetEstimator::bundle_clock() const {
  BundleClock c;
  c.identity = false;
  c.time_zero = clock_.time_zero;
  c.time_mult = clock_.time_mult ? clock_.time_mult : 1;
  c.time_shift = clock_.time_shift;
  c.pt_offset = offset_.value_or(0);
  return c;
}

}  // namespace kt
