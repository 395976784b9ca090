#include "kthost/trace/loss_counters.h"

#include "kthost/bundle/bundle.h"
#include "ktproto.h"

namespace kt {

LossCounters LossCounters::collect(const EventLog& log, const DecoderStats& decoder, const TextSaverStats& saver,
                                   uint64_t acks_failed) {
  LossCounters l;
  l.perf_ring = log.lost(KTP_LOST_PERF_RING);
  l.queue = log.lost(KTP_LOST_QUEUE);
  l.guard_timeout = log.lost(KTP_LOST_GUARD_TIMEOUT);
  l.module_race = log.lost(KTP_LOST_MODULE_RACE);
  l.unguarded = log.lost(KTP_LOST_GUARD_UNGUARDED);
  l.guard_timeout_since_load = log.lost_since_load(KTP_LOST_GUARD_TIMEOUT);
  l.unguarded_since_load = log.lost_since_load(KTP_LOST_GUARD_UNGUARDED);
  l.unloads_lost = saver.unloads_lost;
  l.unloads_unverified = saver.unloads_unverified;
  l.holds_failed = saver.guard_failed;
  l.acks_failed = acks_failed;
  l.events_dropped = log.dropped();
  l.sideband_errors = decoder.errors() + decoder.out_of_order;
  l.frames_missing = decoder.frames_missing;
  return l;
}

uint64_t LossCounters::total() const {
  return perf_ring + queue + guard_timeout + module_race + unguarded + unloads_lost + unloads_unverified + holds_failed + acks_failed +
         events_dropped + sideband_errors + frames_missing + pt_unconfirmed;
}

// The flat key names summary.json has always used, plus the newer ones.
nlohmann::json LossCounters::to_json() const {
  return {{"lost_perf_ring", perf_ring},
          {"lost_queue", queue},
          {"lost_guard_miss", guard_timeout},
          {"lost_module_race", module_race},
          {"lost_unguarded", unguarded},
          {"guard_missed_since_load", guard_timeout_since_load},
          {"unguarded_since_load", unguarded_since_load},
          {"unloads_lost", unloads_lost},
          {"unloads_unverified", unloads_unverified},
          {"holds_failed", holds_failed},
          {"acks_failed", acks_failed},
          {"events_dropped", events_dropped},
          {"decode_errors", sideband_errors},
          {"frames_missing", frames_missing},
          {"pt_unconfirmed_cpus", pt_unconfirmed},
          {"lost_total", total()}};
}

void LossCounters::to_bundle(BundleWriter& bundle) const {
  bundle.set_loss("perf_ring", perf_ring);
  bundle.set_loss("queue", queue);
  bundle.set_loss("guard_miss", guard_timeout);
  bundle.set_loss("module_race", module_race);
  bundle.set_loss("unguarded", unguarded);
  bundle.set_loss("unloads_lost", unloads_lost);
  bundle.set_loss("unloads_unverified", unloads_unverified);
  bundle.set_loss("guard_failed", holds_failed);
  bundle.set_loss("acks_failed", acks_failed);
  bundle.set_loss("events_dropped", events_dropped);
  bundle.set_loss("sideband_errors", sideband_errors);
  bundle.set_loss("frames_missing", frames_missing);
  bundle.set_loss("pt_unconfirmed_cpus", pt_unconfirmed);
}

std::string LossCounters::describe() const {
  std::string out;
  auto add = [&out](uint64_t n, const char* what) {
    if (!n) return;
    out += (out.empty() ? "lost: " : ", ") + std::to_string(n) + " " + what;
  };
  add(perf_ring, "perf-ring records");
  add(queue, "queued frames");
  add(guard_timeout, "guard holds timed out");
  add(module_race, "module races");
  add(unguarded, "unguarded frees");
  add(unloads_lost, "unloads' text");
  add(unloads_unverified, "unloads copied unverified");
  add(holds_failed, "holds unsaved");
  add(acks_failed, "acks unsent");
  add(events_dropped, "events past the log's cap");
  add(sideband_errors, "corrupt sideband frames");
  add(frames_missing, "missing sideband frames");
  add(pt_unconfirmed, "vCPUs' PT stream ends unconfirmed");
  return out.empty() ? "no losses" : out;
}

}  // namespace kt
