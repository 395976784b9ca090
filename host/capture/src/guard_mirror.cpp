// ktguard's shared block, polled from guest RAM (see guard_mirror.h).
#include "kthost/capture/guard_mirror.h"

#include <atomic>
#include <cstring>

#include "kthost/common/strings.h"
#include "ktguard_uapi.h"

namespace kt {
namespace {

constexpr uint64_t kMaxRange = 64u << 20;           // TextSaver::kMaxCopy
constexpr uint64_t kKernelHalf = 0xffff800000000000;  // canonical kernel addresses
constexpr size_t kMaxReturned = 4096;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Error bad(uint64_t base, const std::string& what) {
  return Error(ErrorCode::InvalidArgument, "ktguard's shared block at " + hex(base) + ": " + what);
}

}  // namespace

size_t GuardMirrorLayout::table_bytes() const { return static_cast<size_t>(slots) * KTGUARD_NOTICE_SIZE; }

Result<GuardMirrorLayout> parse_guard_mirror_header(const uint8_t* p, size_t len, uint64_t base) {
  if (len < sizeof(ktguard_shared_header)) return bad(base, "header of " + std::to_string(len) + " bytes");
  const auto magic = load<uint64_t>(p + offsetof(ktguard_shared_header, magic));
  if (magic != KTGUARD_SHARED_MAGIC) return bad(base, "magic " + hex(magic) + " is not ktguard's");
  const auto version = load<uint32_t>(p + offsetof(ktguard_shared_header, version));
  if (version != KTGUARD_SHARED_VERSION)
    return bad(base, "version " + std::to_string(version) + ", this kthost reads " +
                         std::to_string(KTGUARD_SHARED_VERSION));
  GuardMirrorLayout l;
  l.base = base;
  l.slots = load<uint32_t>(p + offsetof(ktguard_shared_header, slots));
  l.ack_offset = load<uint32_t>(p + offsetof(ktguard_shared_header, ack_offset));
  l.notice_offset = load<uint32_t>(p + offsetof(ktguard_shared_header, notice_offset));
  const auto notice_size = load<uint32_t>(p + offsetof(ktguard_shared_header, notice_size));
  if (notice_size != KTGUARD_NOTICE_SIZE) return bad(base, "notice size " + std::to_string(notice_size));
  if (l.slots == 0 || l.slots > KTGUARD_SHARED_SIZE / KTGUARD_NOTICE_SIZE)
    return bad(base, std::to_string(l.slots) + " slots");
  const uint64_t acks_end = uint64_t{l.ack_offset} + uint64_t{l.slots} * 8;
  const uint64_t table_end = uint64_t{l.notice_offset} + uint64_t{l.slots} * KTGUARD_NOTICE_SIZE;
  if (l.ack_offset < sizeof(ktguard_shared_header) || l.ack_offset % 8 || acks_end > KTGUARD_SHARED_SIZE)
    return bad(base, "ack words at " + std::to_string(l.ack_offset) + " do not fit the block");
  if (l.notice_offset < sizeof(ktguard_shared_header) || l.notice_offset % 8 || table_end > KTGUARD_SHARED_SIZE)
    return bad(base, "notices at " + std::to_string(l.notice_offset) + " do not fit the block");
  if (l.notice_offset < acks_end && l.ack_offset < table_end) return bad(base, "ack words and notices overlap");
  return l;
}

std::vector<MirrorNotice> whole_mirror_notices(const GuardMirrorLayout& l, const std::vector<uint8_t>& first,
                                               const std::vector<uint8_t>& second, uint64_t* rejected) {
  std::vector<MirrorNotice> out;
  const size_t n = std::min<size_t>({l.slots, first.size() / KTGUARD_NOTICE_SIZE, second.size() / KTGUARD_NOTICE_SIZE});
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* a = first.data() + i * KTGUARD_NOTICE_SIZE;
    const uint8_t* b = second.data() + i * KTGUARD_NOTICE_SIZE;
    const auto id = load<uint64_t>(a + offsetof(ktguard_notice, id));
    if (id == 0 || std::memcmp(a, b, KTGUARD_NOTICE_SIZE) != 0) continue;  // free, or changing
    MirrorNotice m;
    m.notice.id = id;
    m.notice.start = load<uint64_t>(a + offsetof(ktguard_notice, start));
    m.notice.end = load<uint64_t>(a + offsetof(ktguard_notice, end));
    m.notice.kind = load<uint32_t>(a + offsetof(ktguard_notice, kind));
    m.notice.ack_addr = load<uint64_t>(a + offsetof(ktguard_notice, ack_addr));
    m.cpu = load<uint32_t>(a + offsetof(ktguard_notice, cpu));
    m.time_ns = load<uint64_t>(a + offsetof(ktguard_notice, time_ns));
    const bool sane = m.notice.ack_addr == l.base + l.ack_offset + 8 * i && m.notice.start >= kKernelHalf &&
                      m.notice.end > m.notice.start && m.notice.end - m.notice.start <= kMaxRange &&
                      m.notice.kind >= 1 && m.notice.kind <= KTHOST_TEXT_GUARD_KIND_MAX;
    if (!sane) {
      if (rejected) ++*rejected;
      continue;
    }
    out.push_back(m);
  }
  return out;
}

Status GuardMirror::locate(uint64_t ack_addr) {
  const uint64_t base = ack_addr & ~uint64_t{KTGUARD_SHARED_SIZE - 1};
  if (located_ && layout_.base == base) return ok_status();
  KT_TRY(locate_block(base));
  if (ack_addr < base + layout_.ack_offset || ack_addr >= base + layout_.ack_offset + uint64_t{layout_.slots} * 8) {
    forget();
    return bad(base, "the notice's ack word " + hex(ack_addr) + " is not one of its ack words");
  }
  return ok_status();
}

Status GuardMirror::locate_block(uint64_t base) {
  if (base % KTGUARD_SHARED_SIZE) return bad(base, "not aligned to its size");
  if (located_ && layout_.base == base) return ok_status();
  forget();
  uint8_t header[sizeof(ktguard_shared_header)];
  KT_TRY(memory_.read(base, header, sizeof header));
  KT_ASSIGN_OR_RETURN(layout_, parse_guard_mirror_header(header, sizeof header, base));
  located_ = true;
  return ok_status();
}

Result<uint64_t> shared_block_address(const std::vector<GuestSymbolRecord>& symbols, PageWalker& walker) {
  const GuestSymbolRecord* sym = nullptr;
  for (const auto& s : symbols)
    if (s.name == KTGUARD_SHARED_SYMBOL && s.module == "ktguard") sym = &s;
  if (!sym)
    return Error(ErrorCode::NotPresent, std::string("ktguard's ") + KTGUARD_SHARED_SYMBOL +
                                            " is not among the guest's symbols (ktguard not loaded, or older)");
  uint64_t pointer = 0;
  if (auto read = walker.read_virtual(sym->addr, &pointer, sizeof pointer); !read)
    return read.error().with_context(std::string("reading ") + KTGUARD_SHARED_SYMBOL + " at " + hex(sym->addr));
  if (!pointer)
    return Error(ErrorCode::NotPresent, std::string(KTGUARD_SHARED_SYMBOL) + " is NULL: ktguard has no block");
  auto gpa = walker.virt_to_phys(pointer);
  if (!gpa) return gpa.error().with_context(std::string(KTGUARD_SHARED_SYMBOL) + " points to " + hex(pointer));
  return *gpa;
}

void GuardMirror::answered(uint64_t id) {
  returned_.insert(id);
  while (returned_.size() > kMaxReturned) returned_.erase(returned_.begin());
}

void GuardMirror::forget() {
  located_ = have_seq_ = false;
  returned_.clear();
  waiting_.clear();
}

Result<std::vector<MirrorNotice>> GuardMirror::poll() {
  std::vector<MirrorNotice> fresh;
  if (!located_) return fresh;
  ++stats_.polls;
  uint64_t seq = 0;
  KT_TRY(memory_.read(layout_.base + offsetof(ktguard_shared_header, seq), &seq, sizeof seq));
  if (have_seq_ && seq == seq_) return fresh;
  // Two reads of the table, the first wholly before the second.
  std::vector<uint8_t> first(layout_.table_bytes()), second(layout_.table_bytes());
  KT_TRY(memory_.read(layout_.table_gpa(), first.data(), first.size()));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  KT_TRY(memory_.read(layout_.table_gpa(), second.data(), second.size()));
  stats_.table_reads += 2;
  // A change between the seq read and the tables is seen by the next poll.
  seq_ = seq;
  have_seq_ = true;
  waiting_.clear();
  for (auto& m : whole_mirror_notices(layout_, first, second, &stats_.rejected)) {
    waiting_.insert(m.notice.id);
    if (!returned_.insert(m.notice.id).second) continue;
    fresh.push_back(m);
  }
  while (returned_.size() > kMaxReturned) returned_.erase(returned_.begin());
  stats_.notices += fresh.size();
  return fresh;
}

}  // namespace kt
