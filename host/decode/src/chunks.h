// Private: PSB pieces grouped into chunks and decoded on a pool of threads
// (decode_profile, decode_coverage).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kthost/decode/decoder.h"

namespace kt {

// Runs of consecutive pieces of one CPU (about options.chunk_bytes of PT
// each, so that a thread's image only moves forward in time inside one),
// ordered by their first piece's time; only options.cpu's when it is set.
struct Chunks {
  std::vector<std::vector<Piece>> runs;
  uint64_t bytes = 0;  // PT in all the pieces
  const PtStreams* streams = nullptr;  // whose pieces these are: each is released once decoded
};
Chunks chunks_of(const PtStreams& pt, const DecodeOptions& options);

// The number of threads for `chunks`: options.threads (0: every core), at most one per chunk.
unsigned threads_for(const Chunks& chunks, const DecodeOptions& options);

// Calls work(thread, piece) for every piece, each chunk on one thread, on
// `threads` threads; options.progress every 200 ms when set. Stops at the
// first error and returns it. A piece's PT is released once its work is done,
// so at most about `threads` pieces of a mapped stream are resident.
Status for_each_piece(const Chunks& chunks, unsigned threads, const DecodeOptions& options,
                      const std::function<Status(unsigned, const Piece&)>& work);

}  // namespace kt
