#include "pt_encoder.h"

#include <intel-pt.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ktpt {
namespace {

constexpr size_t kEntrySlots = 1024;       // power of two
constexpr size_t kMaxEntries = kEntrySlots / 2;
constexpr uint32_t kTnt64Bits = 47;

bool fits_sext48(uint64_t ip) {
  return static_cast<uint64_t>(static_cast<int64_t>(ip << 16) >> 16) == ip;
}

size_t entry_slot(uint64_t address) {
  return static_cast<size_t>((address * 0x9e3779b97f4a7c15ull) >> 54) & (kEntrySlots - 1);
}

// A frame's interrupted block `p` resumes at `resume`: was that after the
// block's last instruction (true), or inside it (false)?  Callers check
// accepts() first.
bool resumes_after(const Block& p, uint64_t resume) {
  switch (p.end) {
    case EndKind::Fallthrough:
    case EndKind::Halt:
    case EndKind::SoftInt:
      return resume == p.next;
    case EndKind::Cond:
      return resume == p.next || resume == p.target;
    case EndKind::DirectJmp:
    case EndKind::DirectCall:
      return resume == p.target;
    case EndKind::Rep:
      return resume == p.next;  // resuming at the REP itself is "inside": FUP at it
    case EndKind::Indirect:
    case EndKind::Return:
    case EndKind::Iret:
    case EndKind::ToUser:
      return !p.contains_insn(resume);
  }
  return false;
}

bool accepts(const Block& p, uint64_t resume) {
  return p.contains_insn(resume) || resumes_after(p, resume);
}

// Accepts `resume` for a reason other than "an indirect branch may go anywhere".
bool accepts_exactly(const Block& p, uint64_t resume) {
  switch (p.end) {
    case EndKind::Indirect:
    case EndKind::Return:
    case EndKind::Iret:
    case EndKind::ToUser:
      return p.contains_insn(resume);
    default:
      return accepts(p, resume);
  }
}

}  // namespace

void ResumeBoard::wait(const void* owner, const Block* interrupted, uint64_t time) {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_.push_back({owner, interrupted, time});
}

void ResumeBoard::stop_waiting(const void* owner, const Block* interrupted, uint64_t time) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = waiting_.size(); i-- > 0;) {
    const Waiting& w = waiting_[i];
    if (w.owner == owner && w.interrupted == interrupted && w.time == time) {
      waiting_[i] = waiting_.back();
      waiting_.pop_back();
      return;
    }
  }
}

void ResumeBoard::forget(const void* owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(waiting_, [&](const Waiting& w) { return w.owner == owner; });
}

bool ResumeBoard::post(const void* owner, uint64_t resume, uint64_t time) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool fits = std::any_of(waiting_.begin(), waiting_.end(), [&](const Waiting& w) {
    return w.owner != owner && w.time <= time && accepts_exactly(*w.interrupted, resume);
  });
  if (!fits) {
    unfit_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (posts_.size() >= kMaxPosts) {
    posts_.pop_front();
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  posts_.push_back({resume, time});
  count_.store(posts_.size(), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  return true;
}

bool is_kernel_address(uint64_t address) { return address >= 0xffff800000000000ull; }

bool Block::contains_insn(uint64_t address) const {
  if (address < start || address > last) return false;
  const uint64_t offset = address - start;
  return std::binary_search(insn_offsets.begin(), insn_offsets.end(), static_cast<uint16_t>(offset)) &&
         offset <= 0xffff;
}

VcpuEncoder::VcpuEncoder(const EncoderOptions& options, ClockFn clock, void* clock_context)
    : options_(options), clock_(clock), clock_context_(clock_context), entries_(kEntrySlots, 0) {
  pt_config config;
  pt_config_init(&config);
  config.begin = scratch_;
  config.end = scratch_ + sizeof scratch_;
  encoder_ = pt_alloc_encoder(&config);
  if (!encoder_) throw std::runtime_error("pt_alloc_encoder failed");
  out_.reserve(1u << 16);
}

VcpuEncoder::~VcpuEncoder() {
  if (board_) board_->forget(this);
  pt_free_encoder(encoder_);
}

void VcpuEncoder::emit(const pt_packet& packet, std::vector<uint8_t>& to) {
  pt_enc_sync_set(encoder_, 0);
  const int size = pt_enc_next(encoder_, &packet);
  if (size <= 0) {  // a bug in this file, not in the guest: count it, never crash QEMU
    ++stats_.encode_errors;
    return;
  }
  to.insert(to.end(), scratch_, scratch_ + size);
  since_psb_ += static_cast<uint64_t>(size);
  since_time_ += static_cast<uint64_t>(size);
}

// IP compression against the decoder's last IP is only used in the final
// stream with no frames open: packets inserted later in front of deferred ones
// would change the last IP the deferred packets were compressed against.
void VcpuEncoder::emit_ip(int type, uint64_t ip, std::vector<uint8_t>& to, bool compress) {
  pt_packet packet;
  std::memset(&packet, 0, sizeof packet);
  packet.type = static_cast<pt_packet_type>(type);
  packet.payload.ip.ip = ip;
  const bool tracked = compress && &to == &out_ && frames_.empty();
  if (tracked && last_ip_valid_ && (ip >> 16) == (last_ip_ >> 16)) {
    packet.payload.ip.ipc = pt_ipc_update_16;
  } else if (tracked && last_ip_valid_ && (ip >> 32) == (last_ip_ >> 32)) {
    packet.payload.ip.ipc = pt_ipc_update_32;
  } else {
    packet.payload.ip.ipc = fits_sext48(ip) ? pt_ipc_sext_48 : pt_ipc_full;
  }
  emit(packet, to);
  if (tracked) {
    last_ip_ = ip;
    last_ip_valid_ = true;
  }
}

void VcpuEncoder::emit_tip(uint64_t ip) {
  flush_tnt();
  emit_ip(ppt_tip, ip, sink(), true);
}

// Leaving traced code for user mode: the target is not traced, so no IP.
void VcpuEncoder::emit_pgd() {
  flush_tnt();
  write_pgd(sink());
}

void VcpuEncoder::write_pgd(std::vector<uint8_t>& to) {
  pt_packet packet;
  std::memset(&packet, 0, sizeof packet);
  packet.type = ppt_tip_pgd;
  packet.payload.ip.ipc = pt_ipc_suppressed;
  emit(packet, to);
  ++stats_.disables;
}

void VcpuEncoder::emit_tnt_bit(bool taken) {
  tnt_bits_ = (tnt_bits_ << 1) | (taken ? 1u : 0u);
  if (++tnt_count_ == kTnt64Bits) flush_tnt();
}

void VcpuEncoder::flush_tnt() {
  if (tnt_count_ == 0) return;
  pt_packet packet;
  std::memset(&packet, 0, sizeof packet);
  packet.type = tnt_count_ <= 6 ? ppt_tnt_8 : ppt_tnt_64;
  packet.payload.tnt.bit_size = static_cast<uint8_t>(tnt_count_);
  packet.payload.tnt.payload = tnt_bits_;
  tnt_bits_ = 0;
  tnt_count_ = 0;
  emit(packet, sink());
}

void VcpuEncoder::write_psb(std::vector<uint8_t>& to, uint64_t tsc, bool with_fup, uint64_t ip) {
  pt_packet packet;
  std::memset(&packet, 0, sizeof packet);
  packet.type = ppt_psb;
  emit(packet, to);
  std::memset(&packet, 0, sizeof packet);
  packet.type = ppt_mode;
  packet.payload.mode.leaf = pt_mol_exec;
  packet.payload.mode.bits.exec.csl = 1;
  emit(packet, to);
  std::memset(&packet, 0, sizeof packet);
  packet.type = ppt_tsc;
  packet.payload.tsc.tsc = tsc;
  emit(packet, to);
  if (with_fup) emit_ip(ppt_fup, ip, to, false);  // a PSB resets the decoder's last IP: never compressed
  std::memset(&packet, 0, sizeof packet);
  packet.type = ppt_psbend;
  emit(packet, to);
  ++stats_.psbs;
}

void VcpuEncoder::emit_psb(bool with_fup, uint64_t ip) {
  flush_tnt();
  write_psb(sink(), clock_(clock_context_), with_fup, ip);
  last_ip_valid_ = false;
  since_psb_ = 0;
  since_time_ = 0;
}

void VcpuEncoder::learn_entry(uint64_t address) {
  for (size_t slot = entry_slot(address);; slot = (slot + 1) & (kEntrySlots - 1)) {
    if (entries_[slot] == address) return;
    if (entries_[slot] == 0) {
      if (entry_count_ >= kMaxEntries) {
        ++stats_.entries_refused;
        return;
      }
      entries_[slot] = address;
      ++entry_count_;
      ++stats_.entries_learned;
      return;
    }
  }
}

bool VcpuEncoder::is_entry(uint64_t address) const {
  for (size_t slot = entry_slot(address);; slot = (slot + 1) & (kEntrySlots - 1)) {
    if (entries_[slot] == address) return true;
    if (entries_[slot] == 0) return false;
  }
}

void VcpuEncoder::open_frame(const Block* interrupted, uint64_t handler, bool chained) {
  flush_tnt();
  learn_entry(handler);
  ++stats_.events;
  frames_.push_back(Frame{interrupted, handler, deferred_.size(), chained, clock_(clock_context_)});
  if (board_) board_->wait(this, interrupted, frames_.back().time);
}

void VcpuEncoder::close_frame(size_t index, std::vector<uint8_t>&& prefix) {
  const size_t offset = frames_[index].offset;
  deferred_.insert(deferred_.begin() + static_cast<std::ptrdiff_t>(offset), prefix.begin(), prefix.end());
  for (size_t j = index + 1; j < frames_.size(); ++j) frames_[j].offset += prefix.size();
  if (board_) board_->stop_waiting(this, frames_[index].interrupted, frames_[index].time);
  frames_.erase(frames_.begin() + static_cast<std::ptrdiff_t>(index));
  if (frames_.empty()) {
    out_.insert(out_.end(), deferred_.begin(), deferred_.end());
    deferred_.clear();
    last_ip_valid_ = false;
  }
}

// The frame a return to `resume` ends: the innermost one, as handlers nest;
// else (a handler that slept and was switched out, while another context's
// event is innermost) the innermost one whose block it fits exactly.
long VcpuEncoder::find_frame(uint64_t resume) const {
  if (frames_.empty()) return -1;
  if (accepts(*frames_.back().interrupted, resume)) return static_cast<long>(frames_.size() - 1);
  for (size_t k = frames_.size() - 1; k-- > 0;) {
    if (accepts_exactly(*frames_[k].interrupted, resume)) return static_cast<long>(k);
  }
  return -1;
}

void VcpuEncoder::resolve_frame(size_t index, uint64_t resume) {
  const Frame frame = frames_[index];
  const Block& p = *frame.interrupted;
  std::vector<uint8_t> prefix;
  if (resumes_after(p, resume)) {
    ++stats_.resolved_async;
    pt_packet packet;
    std::memset(&packet, 0, sizeof packet);
    switch (p.end) {
      case EndKind::Cond:
        packet.type = ppt_tnt_8;
        packet.payload.tnt.bit_size = 1;
        packet.payload.tnt.payload = resume == p.target ? 1 : 0;
        emit(packet, prefix);
        break;
      case EndKind::Indirect:
      case EndKind::Return:
      case EndKind::Iret:
      case EndKind::ToUser:
        emit_ip(ppt_tip, resume, prefix, false);
        break;
      default:
        break;
    }
  } else {
    ++stats_.resolved_fault;
  }
  emit_ip(ppt_fup, resume, prefix, false);
  emit_ip(ppt_tip, frame.handler, prefix, false);
  close_frame(index, std::move(prefix));
}

// An overflow, as the hardware writes one while tracing stays enabled: OVF,
// then the FUP that binds it (where tracing resumes: the handler), then a
// PSB+ for readers that start there. Without the FUP a decoder takes the
// OVF to mean tracing was off when the overflow resolved (a PSB directly
// after OVF says so), and then waits for a TIP.PGE that never comes: libipt
// stops with "expected tracing enabled event" at the next TNT.
void VcpuEncoder::give_up_top() {
  std::vector<uint8_t> prefix;
  pt_packet packet;
  std::memset(&packet, 0, sizeof packet);
  packet.type = ppt_ovf;
  emit(packet, prefix);
  emit_ip(ppt_fup, frames_.back().handler, prefix, false);  // OVF resets the decoder's last IP: never compressed
  write_psb(prefix, frames_.back().time, true, frames_.back().handler);
  ++stats_.overflows;
  close_frame(frames_.size() - 1, std::move(prefix));
}

// The previous block was an IRET and `target` is the next kernel block.
void VcpuEncoder::return_to(uint64_t target) {
  flush_tnt();
  long index = find_frame(target);
  if (index < 0 && is_entry(target)) {
    // An interrupt came right after the IRET, before its target ran: the
    // IRET's own target is unknown until this handler returns.
    open_frame(prev_, target, true);
    return;
  }
  // No frame fits: a handler that slept and woke here, whose frame another
  // vCPU holds (posted for it: take_resumes_from_board), or an event the
  // encoder did not see as one (after an indirect branch, into an entry not
  // learnt yet). The TIP alone decodes the same instructions here.
  if (index < 0) {
    ++stats_.orphan_irets;
    if (board_) board_->post(this, target, clock_(clock_context_));
  }
  while (index >= 0) {
    const bool chained = frames_[static_cast<size_t>(index)].chained;
    resolve_frame(static_cast<size_t>(index), target);
    // A chained frame's block was the IRET ending the frame just below it.
    if (!chained || index == 0 || !accepts(*frames_[static_cast<size_t>(index - 1)].interrupted, target)) break;
    --index;
  }
  emit_tip(target);
}

// The previous block was an IRET and the next block is user code. A chained
// frame whose IRET block is one of those went to user mode too: its user
// code faulted before it ran, and this is the fault handler's return. The
// frame ends as it happened: TIP.PGD (to user) and TIP.PGE (the handler).
void VcpuEncoder::resolve_return_to_user() {
  for (size_t k = frames_.size(); k-- > 0;) {
    const Frame& frame = frames_[k];
    if (!frame.chained || frame.interrupted->end != EndKind::Iret) continue;
    std::vector<uint8_t> prefix;
    write_pgd(prefix);
    emit_ip(ppt_tip_pge, frame.handler, prefix, false);
    ++stats_.enables;
    ++stats_.unseen_user;
    close_frame(k, std::move(prefix));
    return;
  }
}

// A SYSRET (always to user mode) followed by a kernel block: the user code
// faulted (or was interrupted) before any of its blocks ran.
void VcpuEncoder::reenter_from_user(uint64_t entry) {
  emit_pgd();
  learn_entry(entry);
  emit_ip(ppt_tip_pge, entry, sink(), true);
  ++stats_.enables;
  ++stats_.unseen_user;
}

// A frame whose handler returned on another vCPU: the oldest post that one
// of this vCPU's frames, opened before it, fits exactly resolves that frame
// (innermost first, as handlers nest). Looked at when a post came since the
// last look (a post older than a frame never fits it) and at stop.
void VcpuEncoder::take_resumes_from_board() {
  board_seen_ = board_->generation();
  for (size_t k = frames_.size(); k-- > 0 && !board_->empty();) {
    const Frame& frame = frames_[k];
    uint64_t resume = 0;
    if (!board_->take(frame.time, [&](uint64_t r) { return accepts_exactly(*frame.interrupted, r); }, &resume))
      continue;
    flush_tnt();
    ++stats_.resolved_elsewhere;
    resolve_frame(k, resume);
  }
}

void VcpuEncoder::stop() {
  if (board_ && !frames_.empty()) take_resumes_from_board();
  flush_tnt();
  while (!frames_.empty()) give_up_top();
  if (in_kernel_) emit_pgd();
  in_kernel_ = false;
  prev_ = nullptr;
  came_from_user_ = false;
  started_ = false;  // a restart begins with PSB+: a reader may start there
}

void VcpuEncoder::stop_before(const Block& next) {
  if (in_kernel_ && prev_ && next.kernel && frames_.empty() && next.start != prev_->start &&
      !prev_->contains_insn(next.start)) {
    const Block& p = *prev_;
    bool plain = false;
    switch (p.end) {
      case EndKind::Cond:
        if (next.start == p.target || next.start == p.next) {
          emit_tnt_bit(next.start == p.target);
          plain = true;
        }
        break;
      case EndKind::Fallthrough:
      case EndKind::Halt:
        plain = next.start == p.next;
        break;
      case EndKind::DirectJmp:
      case EndKind::DirectCall:
        plain = next.start == p.target;
        break;
      case EndKind::Rep:
        plain = next.start == p.next;
        break;
      default:
        break;
    }
    if (plain) {
      flush_tnt();
      emit_ip(ppt_fup, next.start, sink(), true);
      ++stats_.stops_at_block;
    }
  }
  stop();
}

void VcpuEncoder::on_block(const Block& b) {
  if (!b.kernel) {
    if (in_kernel_) {
      if (!frames_.empty() && prev_->end == EndKind::Iret) resolve_return_to_user();
      emit_pgd();
      in_kernel_ = false;
      prev_ = nullptr;
    }
    came_from_user_ = true;
    return;
  }
  ++stats_.kernel_blocks;
  const bool rep_repeat = in_kernel_ && prev_->end == EndKind::Rep && b.start == prev_->last;
  if (!rep_repeat) stats_.kernel_insns += b.n_insns;
  if (board_ && !frames_.empty() && board_->generation() != board_seen_) take_resumes_from_board();
  if (!frames_.empty() && (deferred_.size() > options_.deferred_limit || frames_.size() > options_.max_frames)) {
    flush_tnt();
    while (!frames_.empty()) give_up_top();
  }
  if (!started_) {
    emit_psb(false, 0);  // tracing on, packet generation off: no FUP
    started_ = true;
  }
  if (!in_kernel_) {
    if (came_from_user_) learn_entry(b.start);
    came_from_user_ = false;
    flush_tnt();
    emit_ip(ppt_tip_pge, b.start, sink(), true);
    ++stats_.enables;
    in_kernel_ = true;
    prev_ = &b;
    return;
  }
  const Block& p = *prev_;
  const bool truncated = b.start != p.start && p.contains_insn(b.start);
  switch (p.end) {
    case EndKind::Fallthrough:
      if (b.start != p.next && !truncated) open_frame(&p, b.start, false);
      break;
    case EndKind::Cond:
      if (b.start == p.target) {
        emit_tnt_bit(true);
      } else if (b.start == p.next) {
        emit_tnt_bit(false);
      } else if (!truncated) {
        open_frame(&p, b.start, false);
      }
      break;
    case EndKind::DirectJmp:
    case EndKind::DirectCall:
      if (b.start != p.target && !truncated) open_frame(&p, b.start, false);
      break;
    case EndKind::Indirect:
    case EndKind::Return:
      if (truncated) break;
      if (is_entry(b.start)) {
        open_frame(&p, b.start, false);
      } else {
        emit_tip(b.start);
      }
      break;
    case EndKind::Iret:
      if (!truncated) return_to(b.start);
      break;
    case EndKind::ToUser:
      if (!truncated) reenter_from_user(b.start);
      break;
    case EndKind::SoftInt:
      if (truncated) break;
      flush_tnt();
      learn_entry(b.start);
      ++stats_.events;
      emit_ip(ppt_fup, p.last, sink(), true);
      emit_ip(ppt_tip, b.start, sink(), true);
      break;
    case EndKind::Halt:
      if (b.start == p.next || truncated) break;
      flush_tnt();
      learn_entry(b.start);
      ++stats_.events;
      emit_ip(ppt_fup, p.next, sink(), true);
      emit_ip(ppt_tip, b.start, sink(), true);
      break;
    case EndKind::Rep:
      if (b.start != p.last && b.start != p.next && !truncated) open_frame(&p, b.start, false);
      break;
  }
  prev_ = &b;
  if (frames_.empty() && since_psb_ >= options_.psb_interval) {
    emit_psb(true, b.start);
  } else if (time_due_ || (!frames_.empty() && since_time_ >= options_.psb_interval)) {
    // No PSB while a frame is open (its packets may still get a prefix), but
    // the time goes on: a TSC in the deferred packets, in their order, keeps
    // a decoder's clock (and so its choice of text) near the truth. So does
    // a TSC after an idle spell, frame or not: this block is the first after
    // the wakeup, and its event packets (the interrupt that ended the HLT)
    // come before the new time.
    if (time_due_) ++stats_.idle_tscs;
    emit_tsc();
  }
  time_due_ = false;
}

void VcpuEncoder::emit_tsc() {
  flush_tnt();
  pt_packet packet;
  std::memset(&packet, 0, sizeof packet);
  packet.type = ppt_tsc;
  packet.payload.tsc.tsc = clock_(clock_context_);
  emit(packet, sink());
  since_time_ = 0;
}

}  // namespace ktpt
