// decode_profile: PSB pieces, chunks, threads, merge.
#include "kthost/decode/decoder.h"

#include <intel-pt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "chunks.h"
#include "piece_decoder.h"
#include "stack_stitch.h"

namespace kt {

const char* decode_error_kind_name(DecodeErrorKind k) {
  switch (k) {
    case DecodeErrorKind::NoText: return "no_text";
    case DecodeErrorKind::Desync: return "desync";
    case DecodeErrorKind::Overflow: return "overflow";
    case DecodeErrorKind::Other: return "other";
  }
  return "other";
}

std::vector<Piece> split_at_psb(uint32_t cpu, const PtStream& pt) {
  std::vector<Piece> pieces;
  if (pt.empty()) return pieces;
  PtReleaser behind(pt);  // the search reads every byte: keep only a few MiB resident
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());
  config.end = const_cast<uint8_t*>(pt.data()) + pt.size();
  pt_packet_decoder* dec = pt_pkt_alloc_decoder(&config);
  if (!dec) return pieces;
  while (pt_pkt_sync_forward(dec) >= 0) {
    uint64_t offset = 0;
    pt_pkt_get_sync_offset(dec, &offset);
    behind.reached(offset);
    Piece p;
    p.cpu = cpu;
    p.begin = offset;
    // The PSB+ header's TSC is the piece's start time; its FUP (tracing on)
    // is where the previous piece's execution stopped.
    uint64_t fup = 0;
    for (int i = 0; i < 16; ++i) {
      pt_packet packet;
      if (pt_pkt_next(dec, &packet, sizeof packet) < 0) break;
      if (packet.type == ppt_tsc && !p.time) p.time = packet.payload.tsc.tsc;
      if (packet.type == ppt_fup) {
        const auto& ip = packet.payload.ip;
        if (ip.ipc == pt_ipc_full) fup = ip.ip;
        if (ip.ipc == pt_ipc_sext_48) fup = (ip.ip & (1ull << 47)) ? ip.ip | 0xffff000000000000ull : ip.ip & 0xffffffffffffull;
      }
      if (packet.type == ppt_psbend) break;
    }
    if (!pieces.empty()) {
      pieces.back().end = offset;
      pieces.back().next_fup = fup;
      pieces.back().end_time = p.time;
    }
    pieces.push_back(p);
  }
  pt_pkt_free_decoder(dec);
  if (!pieces.empty()) pieces.back().end = pt.size();
  return pieces;
}

Result<Profile> decode_profile(const PtStreams& pt, const VersionedImage& image,
                               const Symbolizer& symbols, const DecodeOptions& options) {
  auto started = std::chrono::steady_clock::now();
  if (options.cpu && !pt.count(*options.cpu))
    return Error(ErrorCode::InvalidArgument, "the bundle has no CPU " + std::to_string(*options.cpu));
  const Chunks chunks = chunks_of(pt, options);
  const uint64_t total_bytes = chunks.bytes;
  const unsigned threads = threads_for(chunks, options);

  using Clock = std::chrono::steady_clock;
  auto lap = [last = started]() mutable {
    auto now = Clock::now();
    double s = std::chrono::duration<double>(now - last).count();
    last = now;
    return s;
  };
  std::map<std::string, double> phases;
  phases["split"] = lap();

  std::vector<std::unique_ptr<PieceDecoder>> decoders;
  for (unsigned i = 0; i < threads; ++i)
    decoders.push_back(std::make_unique<PieceDecoder>(pt, image, symbols, options, i > 0));
  KT_TRY(for_each_piece(chunks, threads, options, [&](unsigned t, const Piece& p) { return decoders[t]->decode(p); }));
  phases["decode"] = lap();

  Profile out;
  out.threads = threads;
  out.bytes = total_bytes;
  std::vector<PieceStacks> stacks;
  for (size_t i = 0; i < decoders.size(); ++i) decoders[i]->merge_into(out, i, stacks);
  phases["merge"] = lap();
  stitch_stacks(stacks, decoders, symbols.base_unknown(), options.task_switches, out);
  phases["stitch"] = lap();
  out.phase_seconds = std::move(phases);
  std::sort(out.errors.begin(), out.errors.end(), [](const DecodeErrorRecord& a, const DecodeErrorRecord& b) {
    return a.cpu != b.cpu ? a.cpu < b.cpu : a.offset < b.offset;
  });
  if (out.errors.size() > options.max_error_examples) out.errors.resize(options.max_error_examples);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (options.check_stack_edges) out.stack_edges = check_stack_edges(out, image, symbols);
  return out;
}

}  // namespace kt
