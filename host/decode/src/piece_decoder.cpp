// PieceDecoder: the block decoder's inner loop and the profile it feeds.
#include "piece_decoder.h"

#include <Zydis/Zydis.h>

#include "piece_walk.h"

#include <intel-pt.h>

#include <algorithm>

namespace kt {

size_t x86_insn_length(const uint8_t* p, size_t n) {
  static thread_local ZydisDecoder decoder;
  static thread_local bool ready = false;
  if (!ready) {
    ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    ready = true;
  }
  ZydisDecoderContext context;
  ZydisDecodedInstruction insn;
  if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, &context, p, n, &insn))) return 0;
  return insn.length;
}

uint8_t classify_x86(const uint8_t* p, size_t n) {
  size_t i = 0;
  while (i < n && i < 14) {
    uint8_t b = p[i];
    bool prefix = b == 0x66 || b == 0x67 || b == 0xF2 || b == 0xF3 || b == 0xF0 || b == 0x2E || b == 0x36 ||
                  b == 0x3E || b == 0x26 || b == 0x64 || b == 0x65;
    if (!prefix) break;
    ++i;
  }
  if (i < n && (p[i] & 0xF0) == 0x40) ++i;  // REX
  if (i >= n) return kClsOther;
  uint8_t op = p[i];
  // libipt's classes, which it gives for a block it decoded instruction by
  // instruction but not always for one from its block cache (ptic_unknown):
  // both must end in the same class. Software interrupts are far calls.
  if (op == 0xE8 || op == 0x9A) return kClsCall;
  if (op == 0xCC || op == 0xCD || op == 0xCE || op == 0xF1) return kClsCall;  // INT3, INT n, INTO, INT1
  if (op == 0xC3 || op == 0xC2) return kClsReturn;
  if (op == 0xCB || op == 0xCA || op == 0xCF) return kClsFarReturn;  // RETF, IRET
  if (op == 0xE9 || op == 0xEB || op == 0xEA) return kClsJump;
  if ((op >= 0x70 && op <= 0x7F) || (op >= 0xE0 && op <= 0xE3)) return kClsCond;
  if (op == 0xFF && i + 1 < n) {
    unsigned reg = (p[i + 1] >> 3) & 7;
    if (reg == 2 || reg == 3) return kClsCall;
    if (reg == 4 || reg == 5) return kClsJump;
  }
  if (op == 0x0F && i + 1 < n) {
    uint8_t op2 = p[i + 1];
    if (op2 == 0x07 || op2 == 0x35) return kClsFarReturn;  // SYSRET, SYSEXIT
    if (op2 == 0x05 || op2 == 0x34) return kClsCall;    // SYSCALL, SYSENTER
    if (op2 >= 0x80 && op2 <= 0x8F) return kClsCond;
  }
  return kClsOther;
}

DecodeErrorKind classify_pt_error(int code) {
  switch (pt_errcode(code)) {
    case pte_nomap: return DecodeErrorKind::NoText;
    case pte_bad_query:
    case pte_bad_packet:
    case pte_nosync:
    case pte_bad_opc:
    case pte_bad_context:
    case pte_event_ignored:
    case pte_noip:
    case pte_bad_insn:
    case pte_bad_retcomp:
    case pte_bad_status_update: return DecodeErrorKind::Desync;
    default: return DecodeErrorKind::Other;
  }
}

void PieceScratch::reset() {
  for (uint32_t f : fn_touched) fn_insns[f] = fn_calls[f] = 0;
  fn_touched.clear();
  for (uint32_t n : node_touched) node_insns[n] = 0;
  node_touched.clear();
  edges.clear();
  new_blocks.clear();
  errors.clear();
  error_counts.clear();
  switch_out.clear();
  time_marks.clear();
  gap_since_mark = false;
  first_ip = 0;
  end = {};
  insns = blocks = error_total = t_end = skipped_bytes = loop_insns_dropped = 0;
}

PieceDecoder::OwnIscache::~OwnIscache() {
  if (cache) pt_iscache_free(cache);
}

namespace {
// A thread's own section cache, or null (the shared one) where libipt
// cannot give the same isids: slower, never wrong.
pt_image_section_cache* own_iscache_for(const VersionedImage& image, bool wanted) {
  if (!wanted) return nullptr;
  auto cache = image.make_thread_iscache();
  return cache ? *cache : nullptr;
}
}  // namespace

PieceDecoder::PieceDecoder(const PtStreams& pt, const VersionedImage& image,
                           const Symbolizer& symbols, const DecodeOptions& options, bool own_sections)
    : pt_(pt),
      image_(image),
      symbols_(symbols),
      options_(options),
      own_iscache_{own_iscache_for(image, own_sections)},
      cursor_(image, own_iscache_.cache),
      cache_(size_t{1} << std::min(options.cache_bits, 24u)) {
  for (PieceScratch* s : {&a_, &b_}) {
    s->fn_insns.assign(symbols.size(), 0);
    s->fn_calls.assign(symbols.size(), 0);
    s->node_insns.assign(1, 0);
  }
  fn_insns_.assign(symbols.size(), 0);
  fn_calls_.assign(symbols.size(), 0);
  fn_kind_.reserve(symbols.size());
  for (uint32_t f = 0; f < symbols.size(); ++f) fn_kind_.push_back(function_kind_of(symbols.function(f).name));
}

PieceWalk::Place PieceDecoder::place_of(uint64_t ip, uint64_t time) const {
  const uint32_t fn = symbols_.lookup(ip, time);
  return {fn, fn != Symbolizer::kUnknown && symbols_.function(fn).start == ip, fn_kind_[fn]};
}

void PieceDecoder::forget_leaders() {
  for (auto& e : cache_) e.leader_seen = false;
}

uint32_t PieceDecoder::insns_before(const pt_block& block, uint64_t stop, uint64_t time) const {
  if (stop < block.ip || stop > block.end_ip || block.end_ip - block.ip > 4096) return UINT32_MAX;
  uint8_t bytes[4096 + 15];
  size_t n = image_.read(block.ip, time, bytes, std::min<uint64_t>(sizeof bytes, block.end_ip - block.ip + 15));
  uint64_t at = block.ip;
  uint32_t count = 0;
  while (at < stop) {
    size_t len = x86_insn_length(bytes + (at - block.ip), n - std::min<size_t>(n, at - block.ip));
    if (len == 0) return UINT32_MAX;
    at += len;
    ++count;
  }
  return at == stop ? count : UINT32_MAX;
}

std::vector<PieceDecoder::BlockPart> PieceDecoder::split_block(uint64_t ip, uint64_t end_ip, int isid,
                                                               uint64_t time) const {
  std::vector<BlockPart> parts;
  if (end_ip < ip || end_ip - ip > 4096) return parts;
  std::vector<uint8_t> bytes(end_ip - ip + 15);
  size_t n = 0;
  int v = image_.version_of_isid(isid);
  if (v >= 0) {
    const auto& ver = image_.versions()[v];
    if (ip >= ver.start && ip - ver.start < ver.size) {
      n = std::min<uint64_t>(bytes.size(), ver.size - (ip - ver.start));
      std::copy_n(image_.data(ver) + (ip - ver.start), n, bytes.begin());
    }
  }
  if (n == 0) n = image_.read(ip, time, bytes.data(), bytes.size());
  uint64_t at = ip;
  while (at <= end_ip) {
    size_t len = x86_insn_length(bytes.data() + (at - ip), n - std::min<size_t>(n, at - ip));
    if (len == 0) return {};
    uint32_t fn = symbols_.lookup(at, time);
    if (parts.empty() || parts.back().fn != fn)
      parts.push_back({fn, 0, fn != Symbolizer::kUnknown && symbols_.function(fn).start == at});
    parts.back().ninsn++;
    at += len;
  }
  return parts;
}

PieceDecoder::CacheEntry& PieceDecoder::lookup(uint64_t ip, uint64_t end_ip, int isid, int iclass, uint64_t time) {
  uint64_t h = (ip ^ (end_ip << 7) ^ (static_cast<uint64_t>(isid) * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull;
  CacheEntry& e = cache_[(h >> 40) & (cache_.size() - 1)];
  if (e.ip == ip && e.end_ip == end_ip && e.isid == isid) return e;
  e.ip = ip;
  e.end_ip = end_ip;
  e.isid = isid;
  e.leader_seen = false;
  e.fn = symbols_.lookup(ip, time);
  e.split = 0;
  if (e.fn != Symbolizer::kUnknown && end_ip >= symbols_.function(e.fn).end) {
    auto parts = split_block(ip, end_ip, isid, time);
    if (parts.size() > 1) {
      size_t slot = static_cast<size_t>(&e - cache_.data());
      if (splits_.size() < cache_.size()) splits_.resize(cache_.size());
      splits_[slot] = std::move(parts);
      e.split = 1;
    }
  }
  switch (iclass) {
    case ptic_call:
    case ptic_far_call: e.cls = kClsCall; break;
    case ptic_return: e.cls = kClsReturn; break;
    case ptic_far_return: e.cls = kClsFarReturn; break;
    case ptic_jump:
    case ptic_far_jump: e.cls = kClsJump; break;
    case ptic_cond_jump: e.cls = kClsCond; break;
    case ptic_other: e.cls = kClsOther; break;
    default: {
      uint8_t buf[15];
      size_t n = 0;
      int v = image_.version_of_isid(isid);
      if (v >= 0) {
        const auto& ver = image_.versions()[v];
        if (end_ip >= ver.start && end_ip - ver.start < ver.size) {
          n = std::min<uint64_t>(15, ver.size - (end_ip - ver.start));
          std::copy_n(image_.data(ver) + (end_ip - ver.start), n, buf);
        }
      }
      if (n == 0) n = image_.read(end_ip, time, buf, sizeof buf);
      e.cls = classify_x86(buf, n);
    }
  }
  return e;
}

Status PieceDecoder::run(const Piece& piece, int64_t shift, PieceScratch& s) {
  const auto& data = pt_.at(piece.cpu);
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(data.data()) + piece.begin;
  config.end = const_cast<uint8_t*>(data.data()) + piece.end;
  config.flags.variant.block.end_on_call = 1;
  config.flags.variant.block.end_on_jump = 1;
  config.flags.variant.block.enable_tick_events = 1;
  pt_block_decoder* dec = pt_blk_alloc_decoder(&config);
  if (!dec) return Error(ErrorCode::LimitExceeded, "pt_blk_alloc_decoder failed");
  if (auto st = cursor_.seek(piece.time, shift); !st) {
    pt_blk_free_decoder(dec);
    return st;
  }
  pt_blk_set_image(dec, cursor_.image());
  PieceWalk walk(tree_, s, piece.time, symbols_.base_unknown());
  auto record = [&](DecodeErrorKind seen, int code, uint64_t ip, const char* why = nullptr) {
    DecodeErrorKind kind = walk.on_error(seen);
    const char* detail = kind != seen ? "no text at this address while the time was unknown after an overflow"
                         : why       ? why
                         : code      ? pt_errstr(pt_errcode(code))
                                     : "overflow";
    s.error_counts[kind]++;
    if (kind != DecodeErrorKind::Overflow) s.error_total++;
    if (s.errors.size() >= options_.max_error_examples) return;
    uint64_t offset = 0;
    pt_blk_get_offset(dec, &offset);
    s.errors.push_back({kind, piece.cpu, piece.begin + offset, ip, walk.now(), detail});
  };
  auto update_time = [&](uint64_t t) {
    walk.on_time(t);
    if (walk.now() >= cursor_.next_change()) cursor_.advance(walk.now());
  };
  // Text can loop with no branch that needs trace (a cycle of direct jumps,
  // in real code or in text the guest overwrote): libipt then returns blocks
  // forever without reading a packet. Bounded here, and reported.
  // The blocks decoded since the trace offset last moved are held
  // (unconfirmed) until it moves again: if they turn out to be such a loop,
  // they are dropped, not counted as instructions that ran.
  uint64_t last_offset = UINT64_MAX, blocks_here = 0;
  std::vector<pt_block> tail, unconfirmed;
  // cut: the block was cut before its last instruction, whose branch is
  // then the next piece's.
  uint64_t last_end_ip = 0;  // the last instruction of the block before
  auto process = [&](const pt_block& block, bool cut = false) {
    if (block.ninsn == 0) return;
    const bool after_last = block.ip > last_end_ip && block.ip - last_end_ip <= 2;
    last_end_ip = block.end_ip;
    CacheEntry& e = lookup(block.ip, block.end_ip, block.isid, block.iclass, walk.now());
    const bool was_landed = walk.landed();
    if (walk.leader() && !e.leader_seen) {
      e.leader_seen = true;
      s.new_blocks.emplace_back(e.fn, block.ip);
    }
    if (e.split) {
      // The parts in order; the last one ends with the block's branch.
      // (A block cut at a piece's end is cut in its parts too.)
      const auto& parts = splits_[static_cast<size_t>(&e - cache_.data())];
      uint32_t left = block.ninsn;
      for (size_t i = 0; i < parts.size() && left > 0; ++i) {
        uint32_t n = std::min(parts[i].ninsn, left);
        left -= n;
        bool last = i + 1 == parts.size() || left == 0;
        walk.on_block({parts[i].fn, n + (last ? left : 0), last && !cut ? e.cls : static_cast<uint8_t>(kClsOther),
                       parts[i].at_entry, fn_kind_[parts[i].fn], i == 0 && after_last});
        if (last) break;
      }
    } else {
      bool at_entry = e.fn != Symbolizer::kUnknown && block.ip == symbols_.function(e.fn).start;
      walk.on_block({e.fn, block.ninsn, cut ? static_cast<uint8_t>(kClsOther) : e.cls, at_entry, fn_kind_[e.fn],
                     after_last});
    }
    if (!was_landed && walk.landed()) s.first_ip = block.ip;
  };
  // Hands on the held blocks in order: the unconfirmed ones, then the tail.
  auto flush = [&] {
    for (auto& held : unconfirmed) process(held);
    unconfirmed.clear();
    for (auto& held : tail) process(held);
    tail.clear();
  };
  int status = pt_blk_sync_forward(dec);
  while (status >= 0) {
    while (status & pts_event_pending) {
      flush();  // events keep their place among the blocks
      pt_event ev;
      status = pt_blk_event(dec, &ev, sizeof ev);
      if (status < 0) break;
      if (ev.has_tsc) update_time(ev.tsc);
      switch (ev.type) {
        case ptev_overflow:
          record(DecodeErrorKind::Overflow, 0, ev.variant.overflow.ip);
          walk.on_overflow();
          break;
        case ptev_enabled:
        case ptev_disabled:
        case ptev_async_disabled: walk.on_tracing_changed(); break;
        case ptev_async_branch:
          // An event that goes where it struck re-enters the handler it
          // struck at its first instruction (the software PT's record of a
          // handler block QEMU started twice): no frame of its own.
          if (ev.variant.async_branch.from != ev.variant.async_branch.to)
            walk.on_interrupt(place_of(ev.variant.async_branch.from, walk.now()));
          break;
        default: break;
      }
    }
    // Not stopping at pts_eos: the text after the last packet is decoded up
    // to the next branch that needs trace (and a PGE into missing text is
    // reported rather than skipped).
    if (status < 0) break;
    pt_block block{};
    status = pt_blk_next(dec, &block, sizeof block);
    uint64_t offset = 0;
    pt_blk_get_offset(dec, &offset);
    // Blocks after the piece's last packet was read are held: at the end of
    // the piece, execution stopped where the next PSB's FUP points (the last
    // time the held blocks pass it, since no packet follows), and what libipt
    // decoded beyond it is the next piece's. Without a FUP, the final block's
    // branch (it needed the next packet) is the next piece's.
    const bool moved = offset != last_offset;
    if (offset >= piece.end - piece.begin || status == -pte_eos) {
      if (block.ninsn > 0) tail.push_back(block);
      if (status == -pte_eos) {
        for (auto& held : unconfirmed) process(held);
        unconfirmed.clear();
        size_t keep = tail.size();
        uint32_t last_insns = tail.empty() ? 0 : tail.back().ninsn - 1u;
        for (size_t k = tail.size(); piece.next_fup && k-- > 0;) {
          uint32_t before = insns_before(tail[k], piece.next_fup, walk.now());
          if (before != UINT32_MAX) {
            keep = k + 1;
            last_insns = before;
            break;
          }
        }
        for (size_t k = 0; k < keep; ++k) {
          const bool cut = k + 1 == keep && last_insns < tail[k].ninsn;
          if (k + 1 == keep) tail[k].ninsn = static_cast<uint16_t>(last_insns);
          process(tail[k], cut);
        }
        tail.clear();
      }
    } else if (moved || status < 0) {
      flush();
      process(block);
    } else if (block.ninsn > 0) {
      unconfirmed.push_back(block);
    }
    if (moved) {
      last_offset = offset;
      blocks_here = 0;
    } else if (++blocks_here > kMaxBlocksWithoutTrace && status >= 0) {
      uint64_t dropped = 0;
      for (const auto& held : unconfirmed) dropped += held.ninsn;
      for (const auto& held : tail) dropped += held.ninsn;
      unconfirmed.clear();
      tail.clear();
      record(DecodeErrorKind::Other, 0, block.ip,
             "the text loops with no branch that needs trace (a cycle of direct jumps; no packet confirms it, so "
             "its instructions are not counted): the piece's rest is skipped");
      s.loop_insns_dropped += dropped;
      s.skipped_bytes += (piece.end - piece.begin) - std::min(offset, piece.end - piece.begin);
      status = pt_blk_sync_forward(dec);
      continue;
    }
    if (status < 0) {
      if (status == -pte_eos) break;
      flush();
      record(classify_pt_error(status), status, block.ninsn ? block.end_ip : block.ip);
      s.skipped_bytes += (piece.end - piece.begin) - std::min(offset, piece.end - piece.begin);
      status = pt_blk_sync_forward(dec);  // the next PSB is the next piece's: this ends the piece
      continue;
    }
    uint64_t tsc = 0;
    uint32_t lost_mtc = 0, lost_cyc = 0;
    if (pt_blk_time(dec, &tsc, &lost_mtc, &lost_cyc) >= 0) update_time(tsc);
  }
  flush();
  s.t_end = walk.now();
  s.final_node = walk.final_node();
  s.first_fn = walk.first_fn();
  s.first_at_entry = walk.first_at_entry();
  s.first_event_entry = walk.first_event_entry();
  s.end = walk.end_state(last_end_ip);
  pt_blk_free_decoder(dec);
  return ok_status();
}

Status PieceDecoder::decode(const Piece& piece) {
  a_.reset();
  KT_TRY(run(piece, 0, a_));
  uint64_t w = options_.align_window;
  if (w == kAlignAuto) w = piece.end_time > piece.time && piece.time != 0 ? piece.end_time - piece.time : 0;
  if (a_.error_total > 0 && w > 0) {
    // Is there a text change close enough to this piece to be misaligned?
    const auto& order = image_.by_begin();
    const auto& versions = image_.versions();
    uint64_t lo = piece.time > w ? piece.time - w : 1, hi = a_.t_end + w;  // changes at 0 are the start
    auto it = std::lower_bound(order.begin(), order.end(), lo,
                               [&](uint32_t v, uint64_t t) { return versions[v].begin < t; });
    if (it != order.end() && versions[*it].begin <= hi && versions[*it].begin != 0) {
      total_.alignment_retries++;
      forget_leaders();  // the trials must each see their own blocks
      bool fixed = false;
      for (int64_t shift : {-static_cast<int64_t>(w), static_cast<int64_t>(w)}) {
        KT_TRY(try_shift(piece, shift));
        fixed = a_.error_total == 0;
      }
      if (fixed) total_.alignment_fixed++;
      b_.reset();
      forget_leaders();  // a discarded trial may have marked blocks
    }
  }
  if (a_.error_total > 0 && options_.clock_uncertainty > 0) KT_TRY(align_to_changes(piece));
  commit(piece, a_);
  a_.reset();
  return ok_status();
}

// The piece decoded with every text change moved by `shift`, kept in a_ when
// it has fewer errors than a_, or as many and more instructions.
Status PieceDecoder::try_shift(const Piece& piece, int64_t shift) {
  b_.reset();
  KT_TRY(run(piece, shift, b_));
  if (b_.error_total < a_.error_total || (b_.error_total == a_.error_total && b_.insns > a_.insns)) std::swap(a_, b_);
  return ok_status();
}

// The sideband's clock is an estimate: a text change may be placed well away
// from when it happened. Try the piece just after and just before each of
// the nearest changes, and keep the decode with the fewest errors (then the
// most instructions), as the align window does.
Status PieceDecoder::align_to_changes(const Piece& piece) {
  constexpr size_t kMaxChanges = 16;
  const uint64_t u = options_.clock_uncertainty;
  const uint64_t lo = piece.time > u ? piece.time - u : 1, hi = a_.t_end + u;
  std::vector<std::pair<uint64_t, uint64_t>> near;  // (distance, change time)
  auto consider = [&](uint64_t t) {
    if (t == 0 || t == kTimeForever || t < lo || t > hi) return;
    const uint64_t d = t < piece.time ? piece.time - t : t > a_.t_end ? t - a_.t_end : 0;
    near.emplace_back(d, t);
  };
  for (const auto& v : image_.versions()) {
    consider(v.begin);
    consider(v.end);
  }
  std::sort(near.begin(), near.end());
  near.erase(std::unique(near.begin(), near.end()), near.end());
  if (near.size() > kMaxChanges) near.resize(kMaxChanges);
  if (near.empty()) return ok_status();
  total_.alignment_retries++;
  forget_leaders();
  const uint64_t end = std::max(a_.t_end, piece.time);
  for (const auto& [d, t] : near) {
    // The cursor moves every change by the shift: put this one just before
    // the piece's start, then just after its end.
    for (int64_t shift : {static_cast<int64_t>(piece.time - 1 - t), static_cast<int64_t>(end + 1 - t)})
      KT_TRY(try_shift(piece, shift));
    if (a_.error_total == 0) break;
  }
  if (a_.error_total == 0) total_.alignment_fixed++;
  b_.reset();
  forget_leaders();
  return ok_status();
}

void PieceDecoder::commit(const Piece& piece, PieceScratch& s) {
  const uint32_t cpu = piece.cpu;
  auto& per_cpu = cpu_fn_insns_[cpu];
  if (per_cpu.empty()) per_cpu.assign(symbols_.size(), 0);
  for (uint32_t f : s.fn_touched) {
    fn_insns_[f] += s.fn_insns[f];
    fn_calls_[f] += s.fn_calls[f];
    per_cpu[f] += s.fn_insns[f];
  }
  PieceStacks ps;
  ps.cpu = cpu;
  ps.begin = piece.begin;
  ps.time = piece.time;
  ps.switch_out = s.switch_out;
  // The windows between the piece's timing packets, for matching switches.
  uint64_t t = piece.time;
  uint32_t before = 0;
  for (const auto& m : s.time_marks) {
    ps.windows.push_back({t, m.time, m.switches - before, !m.gap});
    t = m.time;
    before = m.switches;
  }
  ps.windows.push_back({t, piece.end_time, static_cast<uint32_t>(s.switch_out.size()) - before, !s.gap_since_mark});
  ps.final_node = s.final_node;
  ps.first_fn = s.first_fn;
  ps.first_at_entry = s.first_at_entry;
  ps.first_event_entry = s.first_event_entry;
  ps.first_ip = s.first_ip;
  ps.end = s.end;
  ps.nodes.reserve(s.node_touched.size());
  for (uint32_t n : s.node_touched) ps.nodes.emplace_back(n, s.node_insns[n]);
  pieces_.push_back(std::move(ps));
  for (const auto& [k, v] : s.edges) edges_[k] += v;
  total_.blocks_seen.insert(s.new_blocks.begin(), s.new_blocks.end());
  for (auto& e : s.errors)
    if (total_.errors.size() < options_.max_error_examples) total_.errors.push_back(e);
  for (const auto& [k, v] : s.error_counts) total_.error_counts[k] += v;
  total_.skipped_bytes += s.skipped_bytes;
  total_.loop_insns_dropped += s.loop_insns_dropped;
  total_.insns += s.insns;
  total_.blocks += s.blocks;
  total_.cpu_insns[cpu] += s.insns;
  total_.pieces++;
}

void PieceDecoder::merge_into(Profile& out, size_t index, std::vector<PieceStacks>& stacks) {
  out.insns += total_.insns;
  out.blocks += total_.blocks;
  out.pieces += total_.pieces;
  for (const auto& [cpu, n] : total_.cpu_insns) out.cpu_insns[cpu] += n;
  for (uint32_t f = 0; f < fn_insns_.size(); ++f)
    if (fn_insns_[f] || fn_calls_[f]) {
      out.functions[f].insns += fn_insns_[f];
      out.functions[f].calls += fn_calls_[f];
    }
  for (const auto& [cpu, v] : cpu_fn_insns_)
    for (uint32_t f = 0; f < v.size(); ++f)
      if (v[f]) out.cpu_functions[cpu][f] += v[f];
  for (const auto& [k, v] : edges_) out.edges[{static_cast<uint32_t>(k >> 32), static_cast<uint32_t>(k)}] += v;
  for (auto& p : pieces_) {
    p.decoder = index;
    stacks.push_back(std::move(p));
  }
  pieces_.clear();
  out.blocks_seen.insert(total_.blocks_seen.begin(), total_.blocks_seen.end());
  for (const auto& e : total_.errors) out.errors.push_back(e);
  for (const auto& [k, v] : total_.error_counts) out.error_counts[k] += v;
  out.skipped_bytes += total_.skipped_bytes;
  out.loop_insns_dropped += total_.loop_insns_dropped;
  out.alignment_retries += total_.alignment_retries;
  out.alignment_fixed += total_.alignment_fixed;
  out.image_rebuilds += cursor_.rebuilds();
}

}  // namespace kt
