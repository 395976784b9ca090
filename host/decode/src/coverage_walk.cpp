#include "coverage_walk.h"

#include <Zydis/Zydis.h>

#include <algorithm>

#include "fast_packets.h"
#include "piece_decoder.h"

namespace kt {

// ---- TextView ----

bool TextView::seek(uint64_t time) {
  const auto& order = image_.by_begin();
  const auto& versions = image_.versions();
  const size_t target = static_cast<size_t>(
      std::partition_point(order.begin(), order.end(), [&](uint32_t v) { return versions[v].begin <= time; }) -
      order.begin());
  bool rebuilt = false;
  if (!built_ || target < applied_) {
    segments_.clear();
    applied_ = 0;
    built_ = true;
    rebuilt = true;
  }
  for (; applied_ < target; ++applied_) apply(order[applied_]);
  return rebuilt;
}

void TextView::apply(uint32_t version) {
  const TextVersion& v = image_.versions()[version];
  if (v.size == 0) return;
  const uint64_t s = v.start, e = v.start + v.size;
  auto it = segments_.upper_bound(s);
  if (it != segments_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > s) {  // a segment from before s reaches into [s, e)
      if (prev->second.end > e) segments_[e] = {prev->second.end, prev->second.version};
      prev->second.end = s;
    }
  }
  it = segments_.lower_bound(s);
  while (it != segments_.end() && it->first < e) {
    if (it->second.end > e) segments_[e] = {it->second.end, it->second.version};
    it = segments_.erase(it);
  }
  segments_[s] = {e, version};
}

size_t TextView::read(uint64_t addr, const uint8_t*& out) const {
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) return 0;
  --it;
  if (addr >= it->second.end) return 0;
  const TextVersion& v = image_.versions()[it->second.version];
  out = image_.data(v) + (addr - v.start);
  return it->second.end - addr;
}

bool TextView::changed_since(uint32_t epoch, uint64_t start, uint64_t end) const {
  const auto& order = image_.by_begin();
  for (size_t i = epoch; i < applied_; ++i) {
    const TextVersion& v = image_.versions()[order[i]];
    if (v.start < end && start < v.start + v.size) return true;
  }
  return false;
}

uint64_t TextView::next_change() const {
  const auto& order = image_.by_begin();
  return applied_ < order.size() ? image_.versions()[order[applied_]].begin : kTimeForever;
}

// ---- blocks ----

namespace {

constexpr uint32_t kMaxBlockInsns = 1024;
constexpr unsigned kProbes = 8;

ZydisDecoder& zydis() {
  static thread_local ZydisDecoder decoder;
  static thread_local bool ready = false;
  if (!ready) {
    ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    ready = true;
  }
  return decoder;
}

// How the instruction ends a block (Fallthrough: it does not).
BlockEnd end_of(const ZydisDecodedInstruction& insn) {
  const bool far = insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR;
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_JMP:
      if (far) return BlockEnd::Far;
      return insn.raw.imm[0].is_relative ? BlockEnd::DirectJump : BlockEnd::Indirect;
    case ZYDIS_MNEMONIC_CALL:
      if (far) return BlockEnd::Far;
      return insn.raw.imm[0].is_relative ? BlockEnd::DirectCall : BlockEnd::IndirectCall;
    case ZYDIS_MNEMONIC_RET: return far ? BlockEnd::Far : BlockEnd::Return;
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ:
    case ZYDIS_MNEMONIC_SYSRET:
    case ZYDIS_MNEMONIC_SYSEXIT: return BlockEnd::Far;
    case ZYDIS_MNEMONIC_SYSCALL:
    case ZYDIS_MNEMONIC_SYSENTER:
    case ZYDIS_MNEMONIC_INT:
    case ZYDIS_MNEMONIC_INT1:
    case ZYDIS_MNEMONIC_INT3:
    case ZYDIS_MNEMONIC_INTO:
    case ZYDIS_MNEMONIC_UD0:
    case ZYDIS_MNEMONIC_UD1:
    case ZYDIS_MNEMONIC_UD2:
    case ZYDIS_MNEMONIC_VMCALL:
    case ZYDIS_MNEMONIC_VMMCALL:
    case ZYDIS_MNEMONIC_VMLAUNCH:
    case ZYDIS_MNEMONIC_VMRESUME: return BlockEnd::Trap;
    default: break;
  }
  if (insn.meta.category == ZYDIS_CATEGORY_COND_BR) return BlockEnd::Cond;
  return BlockEnd::Fallthrough;
}

}  // namespace

CoverageWalk::CoverageWalk(const PtStreams& pt, const VersionedImage& image,
                           const Symbolizer& symbols, unsigned cache_bits)
    : pt_(pt), symbols_(symbols), view_(image), cache_(size_t{1} << std::min(cache_bits, 24u)) {}

bool CoverageWalk::build(FastBlock& b, uint64_t ip, std::string& reason) {
  const uint8_t* bytes = nullptr;
  const size_t avail = view_.read(ip, bytes);
  if (avail == 0) {
    reason = "no text at an address the trace runs";
    return false;
  }
  ZydisDecoderContext context;
  ZydisDecodedInstruction insn;
  size_t at = 0;
  uint32_t n = 0;
  BlockEnd end = BlockEnd::Fallthrough;
  uint64_t target = 0, last_ip = ip;
  while (n < kMaxBlockInsns && at < avail) {
    bool straddles = false;
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&zydis(), &context, bytes + at, avail - at, &insn))) {
      // An instruction may run on into the next version's text (a poked
      // page's overlay ends in it), as libipt reads it.
      if (avail - at >= 15 || !decode_at(ip + at, insn)) {
        reason = "text that does not decode as an instruction";
        return false;
      }
      straddles = true;
    }
    last_ip = ip + at;
    at += insn.length;
    ++n;
    end = end_of(insn);
    if (end != BlockEnd::Fallthrough) {
      if (end == BlockEnd::Cond || end == BlockEnd::DirectJump || end == BlockEnd::DirectCall)
        target = ip + at + static_cast<uint64_t>(insn.raw.imm[0].value.s);
      break;
    }
    if (straddles) break;  // the rest is in other text: a block of its own
  }
  ++builds_;
  b.ip = ip;
  b.next = ip + at;
  b.target = target;
  b.ninsn = n;
  b.end = end;
  b.generation = generation_;
  b.epoch = view_.epoch();
  b.execs = 0;
  b.pending = 0;
  b.leader_seen = false;
  b.succ[0] = b.succ[1] = b.succ[2] = nullptr;
  b.fn = symbols_.lookup(ip, time_);
  b.parts = 0;
  if (b.fn != Symbolizer::kUnknown && last_ip >= symbols_.function(b.fn).end) {
    // It runs past its function's end (into the next symbol): count each part where it belongs.
    std::vector<std::pair<uint32_t, uint32_t>> parts;
    size_t off = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (!decode_at(ip + off, insn)) break;
      const uint32_t fn = symbols_.lookup(ip + off, time_);
      if (parts.empty() || parts.back().first != fn) parts.emplace_back(fn, 0);
      parts.back().second++;
      off += insn.length;
    }
    if (parts.size() > 1) {
      parts_.push_back(std::move(parts));
      b.parts = static_cast<uint32_t>(parts_.size());
    }
  }
  return true;
}

bool CoverageWalk::decode_at(uint64_t addr, ZydisDecodedInstruction& insn) const {
  uint8_t buf[15];
  size_t have = 0;
  while (have < sizeof buf) {
    const uint8_t* bytes = nullptr;
    const size_t n = view_.read(addr + have, bytes);
    if (n == 0) break;
    const size_t take = std::min(n, sizeof buf - have);
    std::copy_n(bytes, take, buf + have);
    have += take;
  }
  ZydisDecoderContext context;
  return have > 0 && ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&zydis(), &context, buf, have, &insn));
}

uint32_t CoverageWalk::insns_before(const FastBlock& b, uint64_t stop) const {
  if (stop < b.ip || stop >= b.next) return UINT32_MAX;
  ZydisDecodedInstruction insn;
  uint64_t at = b.ip;
  uint32_t count = 0;
  while (at < stop) {
    if (!decode_at(at, insn)) return UINT32_MAX;
    at += insn.length;
    ++count;
  }
  return at == stop ? count : UINT32_MAX;
}

void CoverageWalk::add_insns(const FastBlock& b, uint64_t n, std::map<uint32_t, uint64_t>& to) {
  if (n == 0) return;
  if (!b.parts) {
    to[b.fn] += n;
    return;
  }
  // n is whole executions times ninsn, or a count short of one execution.
  const auto& parts = parts_[b.parts - 1];
  const uint64_t whole = n / b.ninsn, rest = n % b.ninsn;
  uint64_t left = rest;
  for (const auto& [fn, k] : parts) {
    uint64_t add = whole * k + std::min<uint64_t>(left, k);
    left -= std::min<uint64_t>(left, k);
    if (add) to[fn] += add;
  }
}

void CoverageWalk::flush_block(FastBlock& b) {
  if (b.ip && b.execs) add_insns(b, b.execs * b.ninsn, fn_insns_);
  b.execs = 0;
}

FastBlock* CoverageWalk::block_at(uint64_t ip, std::string& reason) {
  const size_t mask = cache_.size() - 1;
  const size_t home = static_cast<size_t>((ip * 0x9E3779B97F4A7C15ull) >> 40) & mask;
  FastBlock* free_slot = nullptr;
  FastBlock* busy_slot = nullptr;  // in use by this piece: its counts move to the piece's own
  for (unsigned i = 0; i < kProbes; ++i) {
    FastBlock& b = cache_[(home + i) & mask];
    if (b.ip == ip && b.generation == generation_) {
      if (b.epoch == view_.epoch()) return &b;
      if (!view_.changed_since(b.epoch, b.ip, b.next)) {
        b.epoch = view_.epoch();
        return &b;
      }
      // Its text changed: built anew in place (what it ran so far counts as it was).
      if (b.piece_mark == piece_serial_) {
        if (b.tail_mark == piece_serial_) {
          reason = "text changes under the piece's tail";
          return nullptr;
        }
        add_insns(b, uint64_t{b.pending} * b.ninsn, piece_.evicted);
        b.pending = 0;
      }
      flush_block(b);
      if (!build(b, ip, reason)) {
        b.ip = 0;
        return nullptr;
      }
      return &b;
    }
    if (!free_slot && b.piece_mark != piece_serial_) free_slot = &b;
    if (!busy_slot && b.tail_mark != piece_serial_) busy_slot = &b;
  }
  if (!free_slot) {
    if (!busy_slot) {
      reason = "the block cache is full of this piece's tail";
      return nullptr;
    }
    free_slot = busy_slot;
    add_insns(*free_slot, uint64_t{free_slot->pending} * free_slot->ninsn, piece_.evicted);
    free_slot->pending = 0;
  }
  flush_block(*free_slot);
  if (!build(*free_slot, ip, reason)) {
    free_slot->ip = 0;
    return nullptr;
  }
  return free_slot;
}

void CoverageWalk::enter(FastBlock* b) {
  b->piece_mark = piece_serial_;
  if (in_tail_) {
    b->tail_mark = piece_serial_;
    tail_.push_back({b, b->ninsn, leader_});
  } else {
    if (leader_ && !b->leader_seen) {
      b->leader_seen = true;
      piece_.leaders.push_back(b);
      piece_.leader_places.emplace_back(b->fn, b->ip);
    }
    if (b->pending++ == 0) piece_.touched.push_back(b);
  }
  leader_ = b->end != BlockEnd::Fallthrough;
}

void CoverageWalk::enter_part(FastBlock* b, uint32_t ninsn) {
  b->piece_mark = piece_serial_;
  if (leader_ && !b->leader_seen) {
    b->leader_seen = true;
    piece_.leaders.push_back(b);
    piece_.leader_places.emplace_back(b->fn, b->ip);
  }
  add_insns(*b, ninsn, piece_.evicted);
  leader_ = false;  // inside a block every instruction but the last is not a branch
}

// ---- the walk ----

FastBlock* CoverageWalk::next_block(std::string& reason) {
  if (link_from_) {
    FastBlock* s = link_from_->succ[link_slot_];
    if (s && s->ip == ip_ && s->generation == generation_ && s->epoch == view_.epoch()) return s;
  }
  FastBlock* s = block_at(ip_, reason);
  if (s && link_from_) link_from_->succ[link_slot_] = s;
  return s;
}

void CoverageWalk::go(FastBlock* from, unsigned slot, uint64_t ip) {
  link_from_ = from;
  link_slot_ = slot;
  ip_ = ip;
}

bool CoverageWalk::follow_direct(FastBlock* b) {
  switch (b->end) {
    case BlockEnd::Fallthrough: go(b, 0, b->next); return true;
    case BlockEnd::DirectJump: go(b, 1, b->target); return true;
    case BlockEnd::DirectCall:
      push_return(b->next);
      go(b, 1, b->target);
      return true;
    default: return false;
  }
}

FastBlock* CoverageWalk::run_to_branch(std::string& reason) {
  for (uint64_t n = 0;; ++n) {
    if (n > kMaxBlocksWithoutTrace) {
      reason = "the text loops with no branch that needs trace";
      return nullptr;
    }
    FastBlock* b = next_block(reason);
    if (!b) return nullptr;
    enter(b);
    if (!follow_direct(b)) return b;
  }
}

bool CoverageWalk::walk_to(uint64_t stop, std::string& reason) {
  for (uint64_t n = 0;; ++n) {
    if (ip_ == stop) return true;
    if (n > kMaxBlocksWithoutTrace) {
      reason = "the text loops with no branch that needs trace";
      return false;
    }
    FastBlock* b = next_block(reason);
    if (!b) return false;
    if (stop > b->ip && stop < b->next) {
      const uint32_t before = insns_before(*b, stop);
      if (before == UINT32_MAX) {
        reason = "an event's address is not an instruction boundary";
        return false;
      }
      enter_part(b, before);
      go(nullptr, 0, stop);
      return true;
    }
    enter(b);
    if (!follow_direct(b)) {
      reason = "an event's address is not on the path the trace took";
      return false;
    }
  }
}

void CoverageWalk::push_return(uint64_t ip) {
  // A ring: past kRetStackSize the oldest entry is overwritten.
  ret_top_ = (ret_top_ + 1) % kRetStackSize;
  ret_stack_[ret_top_] = ip;
  if (ret_depth_ < kRetStackSize) ++ret_depth_;
}

bool CoverageWalk::take_tnt_bit(bool taken, std::string& reason) {
  FastBlock* b = run_to_branch(reason);
  if (!b) return false;
  if (b->end == BlockEnd::Cond) {
    if (taken)
      go(b, 1, b->target);
    else
      go(b, 0, b->next);
    return true;
  }
  if (b->end == BlockEnd::Return && taken && ret_depth_ > 0) {  // a compressed return
    go(b, 2, ret_stack_[ret_top_]);
    ret_top_ = (ret_top_ + kRetStackSize - 1) % kRetStackSize;
    --ret_depth_;
    return true;
  }
  reason = "a TNT bit where the text has no conditional branch";
  return false;
}

bool CoverageWalk::take_tip(uint64_t target, std::string& reason) {
  FastBlock* b = run_to_branch(reason);
  if (!b) return false;
  switch (b->end) {
    case BlockEnd::IndirectCall: push_return(b->next); [[fallthrough]];
    case BlockEnd::Indirect:
    case BlockEnd::Return:
    case BlockEnd::Far: go(b, 2, target); return true;
    default: reason = "a TIP where the text has no indirect branch"; return false;
  }
}

bool CoverageWalk::leave_by_branch(std::string& reason) {
  FastBlock* b = run_to_branch(reason);
  if (!b) return false;
  if (b->end == BlockEnd::Indirect || b->end == BlockEnd::IndirectCall || b->end == BlockEnd::Return ||
      b->end == BlockEnd::Far)
    return true;
  reason = "tracing stops where the text has no indirect branch";
  return false;
}

void CoverageWalk::finish_tail(const Piece& piece) {
  // As the full decoder: execution stopped where the next piece's FUP says,
  // the last time the tail passes it; without one, the last block's branch
  // (it needed the next packet) is the next piece's.
  size_t keep = tail_.size();
  uint32_t last = tail_.empty() ? 0 : tail_.back().ninsn - 1;
  for (size_t k = tail_.size(); piece.next_fup && k-- > 0;) {
    const uint32_t before = insns_before(*tail_[k].block, piece.next_fup);
    if (before != UINT32_MAX) {
      keep = k + 1;
      last = before;
      break;
    }
  }
  in_tail_ = false;
  for (size_t k = 0; k < keep; ++k) {
    const uint32_t n = k + 1 == keep ? last : tail_[k].ninsn;
    if (n == 0) break;
    leader_ = tail_[k].leader;
    if (n == tail_[k].ninsn)
      enter(tail_[k].block);
    else
      enter_part(tail_[k].block, n);
  }
  tail_.clear();
}

void CoverageWalk::flush_tail_whole() {
  const bool was = in_tail_;
  in_tail_ = false;
  for (const TailBlock& t : tail_) {
    leader_ = t.leader;
    enter(t.block);
  }
  tail_.clear();
  in_tail_ = was;
}

void CoverageWalk::drop_piece() {
  for (FastBlock* b : piece_.touched) b->pending = 0;
  for (FastBlock* b : piece_.leaders) b->leader_seen = false;  // (or a block that took its slot: seen again)
  piece_.clear();
  tail_.clear();
  in_tail_ = false;
}

void CoverageWalk::commit_piece() {
  for (FastBlock* b : piece_.touched) {
    b->execs += b->pending;
    b->pending = 0;
  }
  leaders_.insert(leaders_.end(), piece_.leader_places.begin(), piece_.leader_places.end());
  for (const auto& [fn, n] : piece_.evicted) fn_insns_[fn] += n;
  piece_.clear();
}

bool CoverageWalk::walk(const Piece& piece, std::string& reason) {
  ++piece_serial_;
  if (view_.seek(piece.time)) ++generation_;
  time_ = piece.time;
  bool ok = walk_packets(piece, reason);
  if (ok) {
    commit_piece();
  } else {
    drop_piece();
  }
  return ok;
}

bool CoverageWalk::walk_packets(const Piece& piece, std::string& reason) {
  const auto& data = pt_.at(piece.cpu);
  const uint8_t* p = data.data() + piece.begin;
  const uint8_t* const end = data.data() + std::min<uint64_t>(piece.end, data.size());
  uint64_t next_change = view_.next_change();
  const bool change_in_span = next_change < (piece.end_time ? piece.end_time : kTimeForever);
  enum class State { Header, Off, On, Async, Overflow } state = State::Header;
  bool header_fup = false;
  uint64_t last_ip = 0, async_from = 0;
  go(nullptr, 0, 0);
  leader_ = true;
  ret_depth_ = 0;
  in_tail_ = false;
  tail_.clear();
  if (end - p < 16) {
    reason = "a piece shorter than its PSB";
    return false;
  }
  // Past its last non-zero byte a piece has only PADs.
  const uint8_t* last_data = end - 1;
  while (last_data > p && *last_data == 0) --last_data;
  while (p < end) {
    const FastPacketInfo pkt = read_fast_packet(p, end, last_ip);
    if (pkt.kind == FastPacket::Truncated) {
      reason = "a packet cut short by the piece's end";
      return false;
    }
    if (pkt.kind == FastPacket::Unknown) {
      reason = "a packet the coverage walk does not model";
      return false;
    }
    const uint8_t* next = p + pkt.size;
    if (next > last_data) in_tail_ = true;  // the piece's last packet: what it leads to is the tail
    switch (pkt.kind) {
      case FastPacket::Pad:
      case FastPacket::Ignored: break;
      case FastPacket::Psb:
        if (p != data.data() + piece.begin) {
          reason = "a PSB inside a piece";
          return false;
        }
        break;
      case FastPacket::PsbEnd:
        if (state != State::Header) {
          reason = "a PSBEND outside PSB+";
          return false;
        }
        state = header_fup ? State::On : State::Off;
        leader_ = true;
        break;
      case FastPacket::Mode: {
        const unsigned leaf = static_cast<unsigned>(pkt.value >> 5);
        if ((leaf == 0 && !(pkt.value & 1)) || (leaf == 1 && (pkt.value & 3)) || leaf > 1) {
          reason = "a mode other than 64-bit, or a transaction";
          return false;
        }
        break;
      }
      case FastPacket::Tsc:
        // The full decoder moves its image forward at the time it reads;
        // so does the view (its blocks are built anew).
        if (pkt.value > time_) {
          time_ = pkt.value;
          if (time_ >= next_change) {
            if (view_.seek(time_)) ++generation_;
            next_change = view_.next_change();
          }
        }
        break;
      case FastPacket::Timing:
        if (change_in_span) {
          reason = "MTC or CYC timing with a text change in the piece's time";
          return false;
        }
        break;
      case FastPacket::Ovf:
        // As libipt: the overflow is taken where the walk stands (after the
        // branch the last packet decided; the text on from there is not
        // run), and execution resumes where the FUP after it says, or at a
        // TIP.PGE when tracing was off by then.
        if (state != State::On && state != State::Off) {
          reason = "an overflow inside PSB+ or an event";
          return false;
        }
        go(nullptr, 0, 0);
        leader_ = true;
        ret_depth_ = 0;
        state = State::Overflow;
        break;
      case FastPacket::Fup:
        if (state == State::Header) {
          go(nullptr, 0, pkt.value);
          header_fup = true;
        } else if (state == State::Overflow) {
          go(nullptr, 0, pkt.value);  // where tracing resumed after the overflow
          leader_ = true;
          state = State::On;
        } else if (state == State::On) {
          if (in_tail_) {
            reason = "the piece ends in an event";
            return false;
          }
          if (!walk_to(pkt.value, reason)) return false;
          async_from = pkt.value;
          state = State::Async;
        } else {
          reason = "a FUP while tracing is off";
          return false;
        }
        break;
      case FastPacket::Tnt:
        if (state != State::On) {
          reason = "a TNT packet while tracing is off or after a FUP";
          return false;
        }
        for (uint32_t i = pkt.tnt_count; i-- > 0;)
          if (!take_tnt_bit((pkt.tnt_bits >> i) & 1, reason)) return false;
        break;
      case FastPacket::Tip:
        if (state == State::Async) {
          if (pkt.ip_suppressed) {
            reason = "an event with no target";
            return false;
          }
          if (async_from != pkt.value) leader_ = true;
          go(nullptr, 0, pkt.value);
          state = State::On;
        } else if (state == State::On) {
          if (pkt.ip_suppressed) {
            reason = "a TIP with its address suppressed";
            return false;
          }
          if (!take_tip(pkt.value, reason)) return false;
        } else {
          reason = "a TIP while tracing is off";
          return false;
        }
        break;
      case FastPacket::TipPge:
        if ((state != State::Off && state != State::Overflow) || pkt.ip_suppressed) {
          reason = "TIP.PGE while tracing is on";
          return false;
        }
        go(nullptr, 0, pkt.value);
        leader_ = true;
        ret_depth_ = 0;
        state = State::On;
        break;
      case FastPacket::TipPgd:
        if (state == State::On) {
          if (!leave_by_branch(reason)) return false;
          flush_tail_whole();  // an event: the blocks before it ran to their end
        } else if (state != State::Async) {
          reason = "TIP.PGD while tracing is off";
          return false;
        }
        state = State::Off;
        leader_ = true;
        break;
      case FastPacket::Unknown:
      case FastPacket::Truncated: break;
    }
    p = next;
  }
  if (state == State::Header || state == State::Async || state == State::Overflow) {
    reason = state == State::Header  ? "a piece that ends in its PSB+"
             : state == State::Async ? "the piece ends in an event"
                                     : "the piece ends in an overflow";
    return false;
  }
  if (state == State::On) {
    in_tail_ = true;
    if (!run_to_branch(reason)) return false;  // up to the branch that needs the next piece's trace
  }
  finish_tail(piece);
  return true;
}

void CoverageWalk::merge_into(Coverage& out) {
  for (FastBlock& b : cache_) flush_block(b);
  for (const auto& [fn, n] : fn_insns_) out.function_insns[fn] += n;
  fn_insns_.clear();
  out.blocks_seen.insert(leaders_.begin(), leaders_.end());
  leaders_.clear();
}

}  // namespace kt
