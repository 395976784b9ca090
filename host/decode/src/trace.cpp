// The instruction trace for a time window (libipt's instruction decoder), and
// the benchmarks' baselines (libipt's instruction and block decoders, plainly).
#include <intel-pt.h>

#include <cstring>

#include "kthost/decode/decoder.h"

namespace kt {
namespace {

const char* insn_kind(pt_insn_class c) {
  switch (c) {
    case ptic_call: return "call";
    case ptic_return: return "return";
    case ptic_jump: return "jump";
    case ptic_cond_jump: return "jcc";
    case ptic_far_call:
    case ptic_far_return:
    case ptic_far_jump: return "far";
    default: return "insn";
  }
}

const char* event_kind(pt_event_type t) {
  switch (t) {
    case ptev_enabled: return "trace-begin";
    case ptev_disabled:
    case ptev_async_disabled: return "trace-end";
    case ptev_async_branch: return "interrupt";
    case ptev_overflow: return "overflow";
    default: return nullptr;
  }
}

}  // namespace

Result<std::vector<TraceLine>> decode_trace(const PtStreams& pt,
                                            const VersionedImage& image, const Symbolizer& symbols,
                                            std::optional<uint32_t> cpu, uint64_t from, uint64_t to,
                                            size_t max_lines) {
  std::vector<TraceLine> lines;
  ImageCursor cursor(image);
  for (const auto& [c, data] : pt) {
    if (cpu && c != *cpu) continue;
    auto pieces = split_at_psb(c, data);
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      if (p.time > to) break;
      if (i + 1 < pieces.size() && pieces[i + 1].time != 0 && pieces[i + 1].time < from) continue;
      pt_config config;
      pt_config_init(&config);
      config.begin = const_cast<uint8_t*>(data.data()) + p.begin;
      config.end = const_cast<uint8_t*>(data.data()) + p.end;
      pt_insn_decoder* dec = pt_insn_alloc_decoder(&config);
      if (!dec) return Error(ErrorCode::LimitExceeded, "pt_insn_alloc_decoder failed");
      KT_TRY(cursor.seek(p.time));
      pt_insn_set_image(dec, cursor.image());
      uint64_t now = p.time;
      int status = pt_insn_sync_forward(dec);
      while (status >= 0 && lines.size() < max_lines && now <= to) {
        while (status & pts_event_pending) {
          pt_event ev;
          status = pt_insn_event(dec, &ev, sizeof ev);
          if (status < 0) break;
          if (ev.has_tsc && ev.tsc > now) now = ev.tsc;
          const char* name = event_kind(ev.type);
          if (name && now >= from && now <= to) {
            TraceLine l;
            l.cpu = c;
            l.time = now;
            l.kind = name;
            if (ev.type == ptev_async_branch) l.ip = ev.variant.async_branch.to;
            if (ev.type == ptev_enabled) l.ip = ev.variant.enabled.ip;
            lines.push_back(std::move(l));
          }
        }
        if (status < 0) break;
        if (now >= cursor.next_change()) cursor.advance(now);
        pt_insn insn;
        std::memset(&insn, 0, sizeof insn);
        status = pt_insn_next(dec, &insn, sizeof insn);
        if (status < 0) {
          if (status != -pte_eos && now >= from && now <= to) {
            TraceLine l;
            l.cpu = c;
            l.time = now;
            l.ip = insn.ip;
            l.kind = std::string("error: ") + pt_errstr(pt_errcode(status));
            lines.push_back(std::move(l));
          }
          break;
        }
        uint64_t tsc = 0;
        uint32_t lost_mtc = 0, lost_cyc = 0;
        if (pt_insn_time(dec, &tsc, &lost_mtc, &lost_cyc) >= 0 && tsc > now) now = tsc;
        if (now >= cursor.next_change()) cursor.advance(now);
        if (now < from || now > to) continue;
        TraceLine l;
        l.cpu = c;
        l.time = now;
        l.ip = insn.ip;
        l.size = insn.size;
        std::memcpy(l.raw, insn.raw, std::min<size_t>(insn.size, sizeof l.raw));
        l.kind = insn_kind(insn.iclass);
        l.function = symbols.lookup(insn.ip, now);
        lines.push_back(std::move(l));
      }
      pt_insn_free_decoder(dec);
      if (lines.size() >= max_lines) return lines;
    }
  }
  return lines;
}

namespace {

// libipt's instruction and block decoders, behind one shape for count_with.
struct InsnApi {
  using Decoder = pt_insn_decoder;
  static Decoder* alloc(const pt_config* c) { return pt_insn_alloc_decoder(c); }
  static void free(Decoder* d) { pt_insn_free_decoder(d); }
  static int set_image(Decoder* d, pt_image* i) { return pt_insn_set_image(d, i); }
  static int sync(Decoder* d) { return pt_insn_sync_forward(d); }
  static int event(Decoder* d, pt_event* e) { return pt_insn_event(d, e, sizeof *e); }
  static int time(Decoder* d, uint64_t* t, uint32_t* m, uint32_t* c) { return pt_insn_time(d, t, m, c); }
  static int next(Decoder* d, uint64_t& count) {
    pt_insn insn;
    int status = pt_insn_next(d, &insn, sizeof insn);
    if (status >= 0) ++count;
    return status;
  }
};
struct BlockApi {
  using Decoder = pt_block_decoder;
  static Decoder* alloc(const pt_config* c) { return pt_blk_alloc_decoder(c); }
  static void free(Decoder* d) { pt_blk_free_decoder(d); }
  static int set_image(Decoder* d, pt_image* i) { return pt_blk_set_image(d, i); }
  static int sync(Decoder* d) { return pt_blk_sync_forward(d); }
  static int event(Decoder* d, pt_event* e) { return pt_blk_event(d, e, sizeof *e); }
  static int time(Decoder* d, uint64_t* t, uint32_t* m, uint32_t* c) { return pt_blk_time(d, t, m, c); }
  static int next(Decoder* d, uint64_t& count) {
    pt_block block{};
    int status = pt_blk_next(d, &block, sizeof block);
    count += block.ninsn;  // a block that ended in an error still counts what it decoded
    return status;
  }
};

// Instructions in a whole stream, decoded plainly: one decoder, the image as
// of time 0 moved forward by time, resynchronised at the next PSB after an error.
template <class Api>
Result<uint64_t> count_with(const PtStream& pt, const VersionedImage& image) {
  ImageCursor cursor(image);
  KT_TRY(cursor.seek(0));
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());
  config.end = const_cast<uint8_t*>(pt.data()) + pt.size();
  typename Api::Decoder* dec = Api::alloc(&config);
  if (!dec) return Error(ErrorCode::LimitExceeded, "allocating a libipt decoder failed");
  Api::set_image(dec, cursor.image());
  uint64_t count = 0;
  for (int status = Api::sync(dec); status >= 0; status = Api::sync(dec)) {
    for (;;) {
      while (status & pts_event_pending) {
        pt_event ev;
        status = Api::event(dec, &ev);
        if (status < 0) break;
      }
      if (status < 0 || (status & pts_eos)) break;
      status = Api::next(dec, count);
      if (status < 0) break;
      uint64_t tsc = 0;
      uint32_t lost_mtc = 0, lost_cyc = 0;
      if (Api::time(dec, &tsc, &lost_mtc, &lost_cyc) >= 0 && tsc >= cursor.next_change()) cursor.advance(tsc);
    }
    if (status == -pte_eos) break;
  }
  Api::free(dec);
  return count;
}

}  // namespace

Result<uint64_t> count_insns_baseline(const PtStream& stream, const VersionedImage& image) {
  return count_with<InsnApi>(stream, image);
}

Result<uint64_t> count_insns_block_baseline(const PtStream& stream, const VersionedImage& image) {
  return count_with<BlockApi>(stream, image);
}

}  // namespace kt
