#include "kthost/trace/tsc_offset_estimator.h"

#include <time.h>
#include <x86intrin.h>

#include <cmath>

namespace kt {
namespace {

// The host TSC rate needs arrivals this far apart (ns) to be trusted to
// about 1e-5 (the two clocks are read a few hundred ns apart).
constexpr uint64_t kMinRateSpanNs = 50'000'000;
// The shift perf itself uses: mult = 2^31 / (TSC ticks per ns) fits in 32
// bits for any TSC faster than 0.5 GHz.
constexpr uint16_t kEstimatedShift = 31;

}  // namespace

HostArrival HostArrival::now() {
  HostArrival a;
  timespec ts{};
  a.tsc = __rdtsc();
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  a.raw_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  return a;
}

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
  hello_ = true;
  raw_minus_perf_.reset();  // a new guest clock session
  if (mode_ == Mode::ArrivalBound) offset_.reset();
}

void TscOffsetEstimator::on_clock_change(const GuestClock& clock) {
  if (!clock.valid) return;
  if (!clock_.valid && mode_ == Mode::ArrivalBound) offset_.reset();  // bounds start with the TSC clock
  clock_ = clock;
}

void TscOffsetEstimator::on_event(uint64_t perf_time, const HostArrival& received) {
  if (mode_ == Mode::None || !perf_time || !hello_) return;
  if (!first_) first_ = received;
  latest_ = received;
  if (!clock_.valid) {
    auto bound = static_cast<int64_t>(received.raw_ns - perf_time);
    if (!raw_minus_perf_ || bound < *raw_minus_perf_) raw_minus_perf_ = bound;
    return;
  }
  if (mode_ != Mode::ArrivalBound) return;
  auto guest_tsc = clock_.to_tsc(perf_time);
  if (!guest_tsc) return;
  // Wrapping difference: both are 64-bit counters on the same timeline.
  auto bound = static_cast<int64_t>(received.tsc - *guest_tsc);
  if (!offset_ || bound < *offset_) offset_ = bound;
}

bool TscOffsetEstimator::has_clock() const {
  if (clock_.valid) return true;
  return raw_minus_perf_ && first_ && latest_ && latest_->raw_ns - first_->raw_ns >= kMinRateSpanNs &&
         latest_->tsc > first_->tsc;
}

BundleClock TscOffsetEstimator::bundle_clock() const {
  if (!clock_.valid) return estimated_clock();
  BundleClock c;
  c.identity = false;
  c.time_zero = clock_.time_zero;
  c.time_mult = clock_.time_mult ? clock_.time_mult : 1;
  c.time_shift = clock_.time_shift;
  c.pt_offset = offset_.value_or(0);
  return c;
}

// perf time = time_zero + (pt * mult) >> shift, with pt_offset 0: the PT TSC
// stands in for the guest TSC. At the first arrival, perf time p0 = raw0 -
// raw_minus_perf is PT time tsc0 (to within the fastest delivery).
BundleClock TscOffsetEstimator::estimated_clock() const {
  BundleClock c;
  c.identity = false;
  c.estimated = true;
  if (!has_clock()) return c;
  const double ticks_per_ns = static_cast<double>(latest_->tsc - first_->tsc) /
                              static_cast<double>(latest_->raw_ns - first_->raw_ns);
  const double mult = std::ldexp(1.0, kEstimatedShift) / ticks_per_ns;
  if (!(mult >= 1.0 && mult < 4294967296.0)) return BundleClock{false, 0, 0, 0, 0};
  c.time_mult = static_cast<uint32_t>(std::llround(mult));
  c.time_shift = kEstimatedShift;
  const uint64_t p0 = first_->raw_ns - static_cast<uint64_t>(*raw_minus_perf_);
  const uint64_t tsc0 = first_->tsc;
  // (tsc0 * mult) >> shift without overflow: split tsc0 as perf does.
  const uint64_t quot = tsc0 >> kEstimatedShift, rem = tsc0 & ((uint64_t{1} << kEstimatedShift) - 1);
  const uint64_t scaled = quot * c.time_mult + ((rem * c.time_mult) >> kEstimatedShift);
  c.time_zero = p0 - scaled;  // wraps, as perf's time_zero does
  c.pt_offset = 0;
  return c;
}

}  // namespace kt
