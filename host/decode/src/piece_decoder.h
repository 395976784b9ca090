// Private: one thread's state for decoding pieces with libipt's block decoder
// and accumulating a profile (piece_decoder.cpp).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kthost/decode/decoder.h"
#include "piece_walk.h"

struct pt_block;

namespace kt {

// One piece's stack counts, by the decoding thread's stack nodes, kept for
// stitching the pieces of a CPU in order (decoder.cpp).
struct PieceStacks {
  uint32_t cpu = 0;
  uint64_t begin = 0;
  size_t decoder = 0;
  std::vector<std::pair<uint32_t, uint64_t>> nodes;  // (node, instructions)
  uint32_t final_node = 0;
  uint32_t first_fn = UINT32_MAX;  // PieceWalk::first_fn
  bool first_at_entry = false;
  bool first_event_entry = false;  // PieceWalk::first_event_entry
  uint64_t first_ip = 0;           // PieceScratch::first_ip
  PieceEnd end;                    // PieceScratch::end
  uint64_t time = 0;                 // Piece::time
  std::vector<uint32_t> switch_out;  // PieceScratch::switch_out
  std::vector<SwitchSpan> windows;   // the piece's time, cut at its timing packets, with the switches in each
};

// Blocks libipt may return without reading a packet before the piece is
// taken to loop (each block ends at a call or jump, so this is far more
// than straight-line code between two packets can hold).
constexpr uint64_t kMaxBlocksWithoutTrace = 1u << 20;

class PieceDecoder {
 public:
  // `own_sections`: this decoder gets a section cache of its own (every
  // decoder thread but the first), falling back to the shared one.
  PieceDecoder(const PtStreams& pt, const VersionedImage& image,
               const Symbolizer& symbols, const DecodeOptions& options, bool own_sections = false);
  // Decodes one piece (with candidate alignments when it has errors) and commits it.
  Status decode(const Piece& piece);
  // Adds this thread's totals into `out`, except stacks: those go to
  // `stacks` (tagged with `index`) for stitch_stacks().
  void merge_into(Profile& out, size_t index, std::vector<PieceStacks>& stacks);
  // Root-to-leaf functions of a node; a marker, if any, comes first.
  void path_of(uint32_t node, std::vector<uint32_t>& path) const { tree_.path_of(node, path); }
  // The marker at the root of a node's path (0: the path starts at a known-empty stack).
  uint32_t root_marker(uint32_t node) const { return tree_.node(node).marker; }

 private:
  struct CacheEntry {
    uint64_t ip = 0, end_ip = 0;
    int isid = -1;
    uint32_t fn = 0;
    uint8_t cls = 0;
    bool leader_seen = false;  // counted for coverage by this thread already
    uint32_t split = 0;        // 1: the block runs into other functions (its parts: splits_[slot])
  };
  // A block that falls through a symbol boundary (entry code, cold parts,
  // labels) counts each instruction for the function it lies in.
  struct BlockPart {
    uint32_t fn = 0, ninsn = 0;
    bool at_entry = false;
  };
  // Where an address is, for the walk: its function, whether it is the entry.
  PieceWalk::Place place_of(uint64_t ip, uint64_t time) const;
  // Instructions of `block` before `stop`, or UINT32_MAX when stop is not
  // an instruction boundary inside it.
  uint32_t insns_before(const pt_block& block, uint64_t stop, uint64_t time) const;
  std::vector<BlockPart> split_block(uint64_t ip, uint64_t end_ip, int isid, uint64_t time) const;
  std::vector<std::vector<BlockPart>> splits_;  // by cache slot
  Status run(const Piece& piece, int64_t shift, PieceScratch& s);
  // A candidate alignment: kept in a_ when it decodes better.
  Status try_shift(const Piece& piece, int64_t shift);
  // DecodeOptions::clock_uncertainty: the piece in a_ retried against nearby text changes.
  Status align_to_changes(const Piece& piece);
  void commit(const Piece& piece, PieceScratch& s);
  CacheEntry& lookup(uint64_t ip, uint64_t end_ip, int isid, int iclass, uint64_t time);
  void forget_leaders();

  const PtStreams& pt_;
  const VersionedImage& image_;
  const Symbolizer& symbols_;
  const DecodeOptions& options_;
  // This thread's own section cache (null: the image's shared one). Declared
  // before cursor_, whose image holds its sections, so it is freed after.
  struct OwnIscache {
    pt_image_section_cache* cache = nullptr;
    ~OwnIscache();
  } own_iscache_;
  ImageCursor cursor_;
  std::vector<CacheEntry> cache_;
  std::vector<FunctionKind> fn_kind_;  // by function id
  CallTree tree_;
  PieceScratch a_, b_;
  // Totals.
  Profile total_;
  std::vector<PieceStacks> pieces_;
  std::map<uint32_t, std::vector<uint64_t>> cpu_fn_insns_;
  std::vector<uint64_t> fn_insns_, fn_calls_;
  std::unordered_map<uint64_t, uint64_t> edges_;
};

}  // namespace kt
