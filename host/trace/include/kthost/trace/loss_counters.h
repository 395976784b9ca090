// Every loss a trace can suffer, in one place, named by the protocol's
// KTP_LOST_* kinds (guest-kit/proto/ktproto.h) and the host's own. Shared by
// `kthost trace` (summary.json, the bundle's losses.json, the one-line
// summary) and `kthost events`. A summary that says zero means zero.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "kthost/capture/text_saver.h"
#include "kthost/sideband/event_log.h"
#include "kthost/sideband/decoder.h"

namespace kt {

class BundleWriter;

struct LossCounters {
  // Reported by the guest in LOST frames, by KTP_LOST_* kind.
  uint64_t perf_ring = 0;      // KTP_LOST_PERF_RING: records the kernel could not keep
  uint64_t queue = 0;          // KTP_LOST_QUEUE: ktguest's queue overflowed
  uint64_t guard_timeout = 0;  // KTP_LOST_GUARD_TIMEOUT: holds that ended without our ack
  uint64_t module_race = 0;    // KTP_LOST_MODULE_RACE
  uint64_t unguarded = 0;      // KTP_LOST_GUARD_UNGUARDED: frees while no host held the guard
  uint64_t guard_timeout_since_load = 0, unguarded_since_load = 0;
  // Found by the host.
  uint64_t unloads_lost = 0;     // best effort: unloads whose text was gone when read
  uint64_t unloads_unverified = 0;  // best effort: copied, but not provably before the free
  uint64_t holds_failed = 0;     // holds whose range could not be read from guest RAM
  uint64_t acks_failed = 0;      // channel acks that could not be sent
  uint64_t events_dropped = 0;   // events past the event log's cap
  uint64_t sideband_errors = 0;  // corrupt, oversized, truncated or out-of-order frames
  uint64_t frames_missing = 0;   // sequence gaps in the guest's frames
  uint64_t pt_unconfirmed = 0;   // vCPUs whose software PT stream's end was not confirmed at stop

  static LossCounters collect(const EventLog& log, const DecoderStats& decoder, const TextSaverStats& saver,
                              uint64_t acks_failed);

  // Everything lost in this trace (the since-load totals describe earlier ones).
  uint64_t total() const;
  nlohmann::json to_json() const;
  void to_bundle(BundleWriter& bundle) const;  // the bundle's losses.json
  // "lost: 3 perf-ring, 1 queue" naming only what is non-zero; "no losses".
  std::string describe() const;
};

}  // namespace kt
