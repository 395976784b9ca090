// TextSaver: copies guest kernel text into the text store when the sideband
// says it appears or is about to go.
//
//   GUARD_NOTICE        ktguard holds the freeing context: the range is read
//                       now, stored (source Guard), and the caller acks with
//                       the status returned. Exact.
//   ksymbol register,   new BPF/out-of-line text or a new module: read at
//   module load         once (source Load), so text that is loaded and freed
//                       inside a trace can be decoded.
//   ksymbol unregister, without the guard, or for text whose freeing path
//   module unload       ktguard could not hook (best effort): read again
//                       (source Unregister). By then the guest may already
//                       have freed or overwritten it; such unloads are
//                       counted as lost, and the rest as unverified (no
//                       copy taken after the fact can prove it predates
//                       the free).
//
// No vCPU is stopped for a copy: the freeing context is held by ktguard, and
// no other context may write text that is being freed (the kernel frees it
// only once nothing can reach it), so the bytes cannot change under the copy.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kthost/introspect/page_walker.h"
#include "kthost/sideband/events.h"
#include "kthost/textstore/text_store.h"

namespace kt {

// One guard hold as the host saw it.
struct HoldRecord {
  uint64_t id = 0, start = 0, end = 0, guest_time = 0;
  uint32_t kind = 0, cpu = 0;
  uint32_t status = 0;      // the ack: enum ktp_hold_status (KTP_HOLD_SAVED, KTP_HOLD_NOT_SAVED)
  double copy_us = 0;       // reading guest RAM and storing
  double host_us = 0;       // notice decoded -> ack written
  uint64_t seen_ns = 0;     // host CLOCK_MONOTONIC when kthost took the notice up (joins with the guest's clock)
  // Found by the mirror's poll: how long that poll's thread slept before it,
  // and then waited for the session's lock (where a late find comes from).
  double poll_sleep_us = 0, poll_lock_us = 0;
  bool word_acked = false;  // the ack word in guest RAM was stored
  bool polled = false;      // found in ktguard's mirror in guest RAM, before its channel notice
  std::string error;        // why it could not be saved
  std::string word_error;   // why the ack word could not be stored (the channel ack still goes)
};

struct TextSaverStats {
  uint64_t guard_notices = 0, guard_saved = 0, guard_failed = 0;
  uint64_t word_acks = 0, word_ack_failed = 0;  // ack words stored in guest RAM, and refused
  uint64_t load_copies = 0, load_failed = 0;
  uint64_t loads_from_guard = 0;  // load events that arrived after their text's guard notice
  uint64_t unregister_copies = 0;
  uint64_t unloads_seen = 0;   // BPF/OOL unregisters and module unloads
  uint64_t unloads_lost = 0;   // best effort: text unreadable, int3-filled or changed when read
  // Best effort: copied, and equal to the load copy, but nothing proves either
  // copy was read before the guest freed the text (the events reach the host
  // after the fact; a short-lived program's slot may already hold int3 or the
  // next program). Counted with the losses: kthost cannot vouch for them.
  uint64_t unloads_unverified = 0;
  uint64_t bytes_saved = 0;
  uint64_t store_errors = 0;
};

class TextSaver {
 public:
  // Where saved text goes: a text store, or a bundle's.
  using Sink = std::function<Status(const TextRecord&)>;
  // `guard`: ktguard answers notices, so unloads need no best-effort copy.
  TextSaver(PageWalker& walker, Sink sink, bool guard);
  TextSaver(PageWalker& walker, TextStoreWriter& store, bool guard)
      : TextSaver(walker, [&store](const TextRecord& r) { return store.append(r); }, guard) {}

  // Stores a guard notice's ack word in guest RAM (GuestMemory::write_word).
  using WordWriter = std::function<Status(uint64_t gpa, uint64_t value)>;
  // With a writer, a saved notice that names an ack word gets the id stored
  // there before on_guard_notice returns: the guest's hold can end without
  // waiting for the channel ack (which the caller still sends).
  void set_ack_word_writer(WordWriter writer) { word_writer_ = std::move(writer); }

  // Whether ktguard holds the guest's frees (GUARD_STATE): when it does not,
  // loads keep a copy and unloads are copied best effort, losses counted.
  void set_guard(bool guard) { guard_ = guard; }
  bool guard() const { return guard_; }
  // How ktguard attached each freeing path (GUARD_HOOKS). With the guard on,
  // the unloads a path it could not hook frees (a kernel without that
  // function) are still copied best effort, and losses counted. Returns the
  // paths that are not held, each as "function (what it frees)".
  std::vector<std::string> set_guard_hooks(const std::vector<GuardHook>& hooks);
  // Whether ktguard holds frees of the text an event of this kind
  // (KTHOST_TEXT_KSYMBOL_BPF, _OOL, KTHOST_TEXT_MODULE) describes.
  bool held(uint16_t kind) const;

  // Saves a GUARD_NOTICE's range; returns the hold (status for the ack).
  HoldRecord on_guard_notice(const SidebandEvent& ev, const GuardNoticeEvent& notice);
  // Everything else: load copies, and best-effort unload copies.
  void on_event(const SidebandEvent& ev);

  const TextSaverStats& stats() const { return stats_; }
  // Best effort: the last unloads that lost their text ("name [start, end): why").
  const std::vector<std::string>& lost_unloads() const { return lost_; }

  // Longest range read for one notice or event; longer ones are cut (and the
  // hold reported as failed).
  static constexpr uint64_t kMaxCopy = 64u << 20;

 private:
  Status copy(uint64_t start, uint64_t len, std::vector<uint8_t>* out);
  void save(TextRecord&& r);
  void load(const SidebandEvent& ev, uint64_t addr, uint64_t len, uint16_t kind, const std::string& name);
  void unload(const SidebandEvent& ev, uint64_t addr, uint64_t len, uint16_t kind, const std::string& name);

  PageWalker& walker_;
  Sink sink_;
  WordWriter word_writer_;
  bool guard_;
  uint32_t unheld_ = 0;  // bits of unload kinds whose freeing path ktguard could not hook
  TextSaverStats stats_;
  std::vector<std::string> lost_;
  // The load copy of each live range, by start address: what an unload is
  // compared with in best-effort mode.
  struct Live {
    uint64_t len;
    std::vector<uint8_t> bytes;
  };
  std::unordered_map<uint64_t, Live> live_;
  // Recent guard copies. A notice overtakes queued events, so a load event
  // can arrive after the notice that freed its text: its bytes then come from
  // here instead of from guest RAM, where they are gone.
  struct Saved {
    uint64_t start, end, time;
    std::vector<uint8_t> bytes;
  };
  std::deque<Saved> recent_;
  uint64_t recent_bytes_ = 0;
};

}  // namespace kt
