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
#pragma once

#include <cstdint>
#include <optional>

#include "kthost/bundle/bundle.h"
#include "kthost/sideband/events.h"

namespace kt {

class TscOffsetEstimator {
 public:
  enum class Mode { None, Exact, ArrivalBound };

  static TscOffsetEstimator exact(int64_t pt_minus_guest);
  static TscOffsetEstimator arrival_bound();
  static TscOffsetEstimator none() { return {}; }

  void on_hello(const GuestClock& clock);
  // An event stamped `perf_time` (guest perf clock) that reached the host at
  // host TSC `received_tsc`.
  void on_event(uint64_t perf_time, uint64_t received_tsc);

  Mode mode() const { return mode_; }
  const GuestClock& guest_clock() const { return clock_; }
  // PT time minus guest TSC, when known.
  std::optional<int64_t> offset() const { return offset_; }
  // The bundle's clock: perf's parameters and the offset (0 when unknown).
  // Only meaningful once guest_clock().valid.
  BundleClock bundle_clock() const;

 private:
  Mode mode_ = Mode::None;
  GuestClock clock_;
  std::optional<int64_t> offset_;
};

}  // namespace kt
