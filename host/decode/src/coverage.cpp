// decode_coverage: PSB pieces walked by CoverageWalk on all cores, and the
// pieces it hands back decoded by the full decoder (PieceDecoder).
#include "kthost/decode/coverage.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "chunks.h"
#include "coverage_walk.h"
#include "piece_decoder.h"

namespace kt {

Coverage coverage_of(const Profile& profile) {
  Coverage c;
  c.blocks_seen = profile.blocks_seen;
  for (const auto& [fn, counts] : profile.functions)
    if (counts.insns) c.function_insns[fn] = counts.insns;
  c.insns = profile.insns;
  c.bytes = profile.bytes;
  c.pieces = profile.pieces;
  c.error_counts = profile.error_counts;
  c.skipped_bytes = profile.skipped_bytes;
  c.loop_insns_dropped = profile.loop_insns_dropped;
  c.threads = profile.threads;
  c.seconds = profile.seconds;
  c.phase_seconds = profile.phase_seconds;
  return c;
}

CoverageDifferences coverage_differences(const Coverage& a, const Coverage& b, const Symbolizer& symbols,
                                         size_t max_examples) {
  CoverageDifferences d;
  auto note = [&](std::string what) {
    if (d.examples.size() < max_examples) d.examples.push_back(std::move(what));
    ++d.count;
  };
  auto name = [&](uint32_t fn) { return fn < symbols.size() ? symbols.function(fn).name : std::to_string(fn); };
  char hex[32];
  for (const auto& [fn, ip] : a.blocks_seen)
    if (!b.blocks_seen.count({fn, ip})) {
      std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(ip));
      note(std::string("block ") + hex + " in " + name(fn) + ": only in the first");
    }
  for (const auto& [fn, ip] : b.blocks_seen)
    if (!a.blocks_seen.count({fn, ip})) {
      std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(ip));
      note(std::string("block ") + hex + " in " + name(fn) + ": only in the second");
    }
  auto count = [](const std::map<uint32_t, uint64_t>& m, uint32_t fn) {
    auto it = m.find(fn);
    return it == m.end() ? uint64_t{0} : it->second;
  };
  std::set<uint32_t> fns;
  for (const auto& [fn, n] : a.function_insns) fns.insert(fn);
  for (const auto& [fn, n] : b.function_insns) fns.insert(fn);
  for (uint32_t fn : fns) {
    const uint64_t x = count(a.function_insns, fn), y = count(b.function_insns, fn);
    if (x != y) note(name(fn) + ": " + std::to_string(x) + " instructions against " + std::to_string(y));
  }
  return d;
}

namespace {

// One thread: the walk, and a full decoder made on the first piece it hands back.
struct CoverageWorker {
  CoverageWorker(const PtStreams& streams, const VersionedImage& text, const Symbolizer& names,
                 const DecodeOptions& decode_options, bool own)
      : pt(streams), image(text), symbols(names), options(decode_options), own_sections(own),
        walk(streams, text, names, 16) {}

  Status take(const Piece& piece) {
    ++pieces;
    std::string reason;
    if (walk.walk(piece, reason)) {
      ++fast;
      return ok_status();
    }
    reasons[reason]++;
    fallback_bytes += piece.end - piece.begin;
    if (!full) full = std::make_unique<PieceDecoder>(pt, image, symbols, options, own_sections);
    return full->decode(piece);
  }

  const PtStreams& pt;
  const VersionedImage& image;
  const Symbolizer& symbols;
  const DecodeOptions& options;
  bool own_sections;
  CoverageWalk walk;
  std::unique_ptr<PieceDecoder> full;
  uint64_t pieces = 0, fast = 0, fallback_bytes = 0;
  std::map<std::string, uint64_t> reasons;
};

}  // namespace

Result<Coverage> decode_coverage(const PtStreams& pt, const VersionedImage& image,
                                 const Symbolizer& symbols, const DecodeOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  auto lap = [last = started]() mutable {
    auto now = Clock::now();
    double s = std::chrono::duration<double>(now - last).count();
    last = now;
    return s;
  };
  if (options.cpu && !pt.count(*options.cpu))
    return Error(ErrorCode::InvalidArgument, "the bundle has no CPU " + std::to_string(*options.cpu));
  const Chunks chunks = chunks_of(pt, options);
  const unsigned threads = threads_for(chunks, options);
  std::map<std::string, double> phases;
  phases["split"] = lap();

  std::vector<std::unique_ptr<CoverageWorker>> workers;
  for (unsigned i = 0; i < threads; ++i)
    workers.push_back(std::make_unique<CoverageWorker>(pt, image, symbols, options, i > 0));
  KT_TRY(for_each_piece(chunks, threads, options, [&](unsigned t, const Piece& p) { return workers[t]->take(p); }));
  phases["decode"] = lap();

  Coverage out;
  out.threads = threads;
  out.bytes = chunks.bytes;
  for (auto& w : workers) {
    w->walk.merge_into(out);
    out.pieces += w->pieces;
    out.fast_pieces += w->fast;
    out.fallback_bytes += w->fallback_bytes;
    for (const auto& [why, n] : w->reasons) out.fallback_reasons[why] += n;
    if (w->full) {
      Profile part;
      std::vector<PieceStacks> unused;
      w->full->merge_into(part, 0, unused);
      out.blocks_seen.insert(part.blocks_seen.begin(), part.blocks_seen.end());
      for (const auto& [fn, counts] : part.functions)
        if (counts.insns) out.function_insns[fn] += counts.insns;
      for (const auto& [kind, n] : part.error_counts) out.error_counts[kind] += n;
      out.skipped_bytes += part.skipped_bytes;
      out.loop_insns_dropped += part.loop_insns_dropped;
    }
  }
  for (auto it = out.function_insns.begin(); it != out.function_insns.end();)
    it = it->second ? std::next(it) : out.function_insns.erase(it);
  for (const auto& [fn, n] : out.function_insns) out.insns += n;
  phases["merge"] = lap();
  out.phase_seconds = std::move(phases);
  out.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return out;
}

}  // namespace kt
