// TscOffsetEstimator: the offset that maps the guest's TSC onto PT time, so
// that sideband events (guest perf clock) can be placed among PT packets.
//
//   Exact       hardware PT stamps the host TSC, and KVM's per-vCPU offset
//               (without TSC scaling) gives guest = host + offset exactly.
//   ArrivalBound the TCG plugin stamps host TSC; each event bounds
//               host - guest from above (it arrived after it happened), and
//               the smallest bound is within the fastest delivery. A HELLO
//               (a new guest clock session) starts the bound afresh.
//   None        no offset is known; the decoder's candidate windows align.
//
// A guest whose perf clock is not the TSC (it marked its TSC unstable:
// cap_user_time_zero is 0) gives no guest TSC to offset. Then, with PT
// stamped by the host TSC (Exact or ArrivalBound), the clock is estimated
// from arrivals alone: perf time is nanoseconds, so host CLOCK_MONOTONIC_RAW
// minus perf time is bounded from above by each arrival, and the host's own
// TSC against CLOCK_MONOTONIC_RAW (first and latest arrival) gives the rate.
// The bundle clock says it was estimated.
#pragma once

#include <cstdint>
#include <optional>

#include "kthost/bundle/bundle.h"
#include "kthost/sideband/events.h"

namespace kt {

// The host's two clocks read together when sideband bytes arrived.
struct HostArrival {
  uint64_t tsc = 0;
  uint64_t raw_ns = 0;  // CLOCK_MONOTONIC_RAW
  static HostArrival now();
};

class TscOffsetEstimator {
 public:
  enum class Mode { None, Exact, ArrivalBound };

  static TscOffsetEstimator exact(int64_t pt_minus_guest);
  static TscOffsetEstimator arrival_bound();
  static TscOffsetEstimator none() { return {}; }

  void on_hello(const GuestClock& clock);
  // The guest's perf clock parameters changed (a CLOCK frame). A TSC clock
  // that appears replaces an estimate; one that goes away (the guest marked
  // its TSC unstable mid-trace) leaves the last parameters in use: perf's
  // clock stays continuous across that change.
  void on_clock_change(const GuestClock& clock);
  // An event stamped `perf_time` (guest perf clock) that reached the host at
  // `received`.
  void on_event(uint64_t perf_time, const HostArrival& received);

  Mode mode() const { return mode_; }
  const GuestClock& guest_clock() const { return clock_; }
  // PT time minus guest TSC, when known (a guest TSC clock only).
  std::optional<int64_t> offset() const { return offset_; }
  // Whether bundle_clock() places sideband times: the guest's TSC clock, or
  // an estimate from arrivals (estimated()).
  bool has_clock() const;
  bool estimated() const { return !clock_.valid && has_clock(); }
  // The bundle's clock: perf's parameters and the offset. Only meaningful
  // when has_clock().
  BundleClock bundle_clock() const;

 private:
  BundleClock estimated_clock() const;

  Mode mode_ = Mode::None;
  GuestClock clock_;
  bool hello_ = false;
  std::optional<int64_t> offset_;
  // Estimate without a guest TSC clock: min(host raw ns - perf time), and the
  // host TSC rate from the first and the latest arrival.
  std::optional<int64_t> raw_minus_perf_;
  std::optional<HostArrival> first_, latest_;
};

}  // namespace kt
