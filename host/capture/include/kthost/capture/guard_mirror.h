// GuardMirror: ktguard's shared block, read straight from guest RAM
// (guest-kit/ktguard/ktguard_uapi.h). Every hold's notice is mirrored there
// while it waits, so the host can poll for holds instead of waiting for each
// notice to come through ktguest and the channel: the hold then ends as soon
// as the host has saved the range and stored the ack word, with no work in
// the guest. The block is found from ktguard's pointer to it (by symbol, once
// the guest's symbols are known) or from any notice's ack word address
// (rounded down to KTGUARD_SHARED_SIZE); everything read from it is untrusted.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/introspect/guest_memory.h"
#include "kthost/introspect/page_walker.h"
#include "kthost/sideband/events.h"

namespace kt {

struct GuardMirrorLayout {
  uint64_t base = 0;  // guest-physical start of the block
  uint32_t slots = 0, ack_offset = 0, notice_offset = 0;
  uint64_t table_gpa() const { return base + notice_offset; }
  size_t table_bytes() const;
};

// The header at the start of the block at `base` (64 bytes): magic, version,
// and a table layout that fits the block. Errors name the field.
Result<GuardMirrorLayout> parse_guard_mirror_header(const uint8_t* header, size_t len, uint64_t base);

struct MirrorNotice {
  GuardNoticeEvent notice;
  uint64_t time_ns = 0;
  uint32_t cpu = 0;
};

// The whole notices of two reads of the table, `first` wholly before
// `second`: a slot counts when both reads hold the same bytes and a non-zero
// id (ktguard zeroes the id before it rewrites a slot, and never reuses one).
// A slot whose notice is not sane (ack word not its own, empty or oversized
// range, unknown kind, a user address) is counted in `rejected`.
std::vector<MirrorNotice> whole_mirror_notices(const GuardMirrorLayout& layout, const std::vector<uint8_t>& first,
                                               const std::vector<uint8_t>& second, uint64_t* rejected);

// The block's guest-physical address before any notice names it: ktguard's
// KTGUARD_SHARED_SYMBOL pointer, found in the guest's symbols (module
// "ktguard") and read through the guest's page tables. Errors: no such symbol
// (ktguard is not loaded, or older), a NULL pointer (ktguard has no block),
// an address that does not translate.
Result<uint64_t> shared_block_address(const std::vector<GuestSymbolRecord>& symbols, PageWalker& walker);

struct GuardMirrorStats {
  uint64_t polls = 0, table_reads = 0, notices = 0, rejected = 0;
};

class GuardMirror {
 public:
  explicit GuardMirror(const GuestMemory& memory) : memory_(memory) {}

  // Finds the block that holds this ack word. A no-op when the block is
  // already known; an error (the block stays unknown) when its header is not
  // ktguard's.
  Status locate(uint64_t ack_addr);
  // Takes the block at `base` (guest-physical, as shared_block_address finds
  // it), once its header reads as ktguard's.
  Status locate_block(uint64_t base);
  bool located() const { return located_; }
  // A new guard session (ktguard may have been reloaded): find it again.
  void forget();
  // A hold answered from its channel notice: poll() never returns it.
  void answered(uint64_t id);

  // The waiting notices not returned before. Only the header's seq is read
  // while nothing changed.
  Result<std::vector<MirrorNotice>> poll();
  const GuardMirrorStats& stats() const { return stats_; }
  // The ids of the notices waiting at the last read of the table (a hold
  // that has ended, or whose slot was changing, is not among them).
  const std::set<uint64_t>& waiting() const { return waiting_; }

 private:
  const GuestMemory& memory_;
  bool located_ = false;
  GuardMirrorLayout layout_;
  uint64_t seq_ = 0;
  bool have_seq_ = false;
  std::set<uint64_t> returned_;  // ids already returned (bounded)
  std::set<uint64_t> waiting_;   // at most slots ids
  GuardMirrorStats stats_;
};

}  // namespace kt
