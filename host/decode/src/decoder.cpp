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

namespace {

// A piece's stack rooted at a marker continues the stack the previous piece
// of its CPU ended with: the marker's count of frames popped below the
// piece's first function, and that function, replace the top of `prefix`.
// Popped below all of `prefix` (or below its [base unknown]), the stack
// stands on [base unknown]: the frames under it were never seen.
std::vector<uint32_t> stitch(const std::vector<uint32_t>& prefix, const std::vector<uint32_t>& path,
                             uint32_t base_unknown) {
  if (path.empty() || path[0] == UINT32_MAX || !(path[0] & kStackMarker)) return path;
  size_t popped = 1 + (path[0] & ~kStackMarker);
  std::vector<uint32_t> out;
  if (popped < prefix.size())
    out.assign(prefix.begin(), prefix.end() - static_cast<long>(popped));
  else if (popped > prefix.size() || prefix[0] == base_unknown)
    out.push_back(base_unknown);
  out.insert(out.end(), path.begin() + 1, path.end());
  if (out.size() > 512) out.erase(out.begin(), out.end() - 512);  // bounded, like the stacks themselves
  return out;
}

// The previous piece of a CPU ended on a call, return or interrupt whose
// destination is where this piece first ran (`fn`): apply it to `prefix`,
// as the walk would have, and count the call.
void land(std::vector<uint32_t>& prefix, uint8_t pending, uint32_t fn, bool at_entry, uint32_t base_unknown,
          Profile& out) {
  auto count_call = [&] {
    const uint32_t caller = prefix.empty() || prefix.back() == base_unknown ? Symbolizer::kUnknown : prefix.back();
    out.functions[fn].calls++;
    out.edges[{caller, fn}]++;
  };
  switch (static_cast<PieceWalk::Pending>(pending)) {
    case PieceWalk::Pending::Return:
      if (prefix.size() > 1) prefix.pop_back();
      else prefix.assign(1, base_unknown);  // returned below everything known
      break;
    case PieceWalk::Pending::Call:
      count_call();
      prefix.push_back(fn);
      break;
    case PieceWalk::Pending::Push: prefix.push_back(fn); break;
    case PieceWalk::Pending::Jump:  // a tail call when it enters another function at its entry
      if (at_entry && !prefix.empty() && prefix.back() != fn) count_call();
      break;
    case PieceWalk::Pending::None: break;
  }
}

struct StackKey {
  size_t decoder;
  uint32_t prefix, node;
  bool operator==(const StackKey& o) const { return decoder == o.decoder && prefix == o.prefix && node == o.node; }
};
struct StackKeyHash {
  size_t operator()(const StackKey& k) const {
    return std::hash<uint64_t>()((uint64_t{k.prefix} << 32 | k.node) * 31 + k.decoder);
  }
};

// Folded stacks from every piece, stitched per CPU in stream order.
void stitch_stacks(std::vector<PieceStacks>& pieces, const std::vector<std::unique_ptr<PieceDecoder>>& decoders,
                   uint32_t base_unknown, Profile& out) {
  std::sort(pieces.begin(), pieces.end(), [](const PieceStacks& a, const PieceStacks& b) {
    return a.cpu != b.cpu ? a.cpu < b.cpu : a.begin < b.begin;
  });
  std::map<std::vector<uint32_t>, uint32_t> prefix_ids;
  std::vector<const std::vector<uint32_t>*> prefixes;
  std::unordered_map<StackKey, uint64_t, StackKeyHash> counts;
  std::vector<uint32_t> prefix, path;
  uint32_t cpu = UINT32_MAX;
  uint8_t pending = 0;  // PieceWalk::Pending at the end of the last piece with a block
  for (const auto& p : pieces) {
    if (p.cpu != cpu) {
      cpu = p.cpu;
      prefix.clear();
      pending = 0;
    }
    if (pending != 0 && p.first_fn != UINT32_MAX) land(prefix, pending, p.first_fn, p.first_at_entry, base_unknown, out);
    const PieceDecoder& d = *decoders[p.decoder];
    uint32_t pid = UINT32_MAX;
    for (const auto& [node, n] : p.nodes) {
      uint32_t key_prefix = 0;
      if (d.root_marker(node)) {
        if (pid == UINT32_MAX) {
          auto [it, fresh] = prefix_ids.try_emplace(prefix, static_cast<uint32_t>(prefixes.size()));
          if (fresh) prefixes.push_back(&it->first);
          pid = it->second;
        }
        key_prefix = pid + 1;
      }
      counts[{p.decoder, key_prefix, node}] += n;
    }
    if (p.final_node != UINT32_MAX) {
      d.path_of(p.final_node, path);
      prefix = stitch(prefix, path, base_unknown);
      pending = p.final_pending;
    }
  }
  for (const auto& [k, n] : counts) {
    decoders[k.decoder]->path_of(k.node, path);
    out.stacks[k.prefix ? stitch(*prefixes[k.prefix - 1], path, base_unknown) : path] += n;
  }
}

}  // namespace

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
  stitch_stacks(stacks, decoders, symbols.base_unknown(), out);
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
