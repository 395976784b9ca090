// Coverage fast path: which functions and basic blocks ran, and how many
// instructions each function ran, without libipt's instruction-by-instruction
// decode.
//
// Each PSB piece is walked packet by packet (TNT bits, TIPs, FUP+TIP pairs,
// TIP.PGE/PGD) against a cache of basic blocks built from the versioned text
// as of the piece's time: a block ends at every branch, and records where it
// goes (fall through, a direct target, or "ask the trace"). Nothing is done
// per instruction, only per block.
//
// The answer is the full decoder's (decode_profile): the same blocks_seen,
// the same instructions per function. Wherever the walk meets something it
// does not model exactly (an overflow, missing text, a packet it does not
// know, a trace that does not fit the text, a timing packet past a text
// change), the whole piece is decoded by the full decoder instead, and the
// reason is counted: never a guess.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/decode/decoder.h"
#include "kthost/decode/image.h"
#include "kthost/decode/symbolizer.h"

namespace kt {

struct Coverage {
  std::set<std::pair<uint32_t, uint64_t>> blocks_seen;  // (function, block start), as Profile::blocks_seen
  std::map<uint32_t, uint64_t> function_insns;           // function id -> instructions (> 0)
  uint64_t insns = 0, bytes = 0;
  uint64_t pieces = 0, fast_pieces = 0;                  // pieces walked here; the rest the full decoder took
  uint64_t fallback_bytes = 0;
  std::map<std::string, uint64_t> fallback_reasons;      // why pieces went to the full decoder
  std::map<DecodeErrorKind, uint64_t> error_counts;      // the full decoder's, on those pieces
  uint64_t skipped_bytes = 0;
  uint64_t loop_insns_dropped = 0;                       // as Profile::loop_insns_dropped
  unsigned threads = 1;
  double seconds = 0;
  std::map<std::string, double> phase_seconds;           // split, decode, merge
};

// The same options as decode_profile (threads, cpu, chunk_bytes, progress).
Result<Coverage> decode_coverage(const PtStreams& pt, const VersionedImage& image,
                                 const Symbolizer& symbols, const DecodeOptions& options);

// The coverage part of a full decode, in the same shape (for comparing and for reports).
Coverage coverage_of(const Profile& profile);

// Where two coverages differ: blocks in one only, functions whose
// instruction counts differ. `examples` holds the first max_examples, named.
struct CoverageDifferences {
  uint64_t count = 0;
  std::vector<std::string> examples;
};
CoverageDifferences coverage_differences(const Coverage& a, const Coverage& b, const Symbolizer& symbols,
                                         size_t max_examples = 10);

}  // namespace kt
