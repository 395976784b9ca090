// The versioned text image: for address X at PT time T, the bytes that were
// there then.
//
// It is a set of immutable versions, each a byte range valid over a time
// interval [begin, end) in PT time. Versions come from mappings (the initial
// snapshot, text copied at load, text saved before a free) and from pokes:
// a poke makes a new version of the poked text from its time on (a whole copy
// for small mappings such as BPF programs, a 4 KiB overlay page for large ones
// such as the core kernel). All version bytes live in one memfd, and each
// version is a section of libipt's image section cache, so that libipt's
// block decoder keeps its per-section block cache: that is what makes the
// decoder fast. A decoder thread keeps a pt_image that an ImageCursor moves
// forward in time by adding the versions that start (libipt shrinks or splits
// what a new section overlaps). Versions that end without a successor stay
// mapped (stale): executing unloaded text decodes against its last bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kthost/bundle/bundle.h"
#include "kthost/common/result.h"

struct pt_image;
struct pt_image_section_cache;

namespace kt {

inline constexpr uint64_t kTimeForever = UINT64_MAX;

struct TextVersion {
  uint64_t start = 0, size = 0;
  uint64_t begin = 0, end = kTimeForever;  // PT time
  uint32_t mapping = 0;                    // which mapping it is a version of
  bool overlay = false;                    // a poked page over a large mapping
  std::string origin;                      // "kcore", "snapshot", "load", "guard", "unregister", "test"
  uint64_t data_offset = 0;                // in the backing memfd
  int isid = 0;                            // libipt section id
};

struct ImageStats {
  uint64_t mappings = 0, versions = 0, pokes = 0, pokes_unmapped = 0, pokes_old_mismatch = 0;
  uint64_t bytes = 0;
  uint64_t poke_quantum = 0;  // 0: every poke at its own time; else pokes this close share a version
};

class VersionedImage {
 public:
  // Builder API: add mappings and pokes in any order, then finalize().
  VersionedImage();
  ~VersionedImage();
  VersionedImage(const VersionedImage&) = delete;
  VersionedImage& operator=(const VersionedImage&) = delete;

  // Text `bytes` at `start`, valid over [begin, end) in PT time.
  void add_mapping(uint64_t start, std::vector<uint8_t> bytes, uint64_t begin, uint64_t end, std::string origin);
  // From `time` on, `new_bytes` at `addr`; `old_bytes` (may be empty) are checked.
  void add_poke(uint64_t addr, std::vector<uint8_t> old_bytes, std::vector<uint8_t> new_bytes, uint64_t time);
  // Builds the versions, the memfd and the libipt sections.
  // Errors: Io (memfd), LimitExceeded (over max_bytes of version data), InvalidInput.
  Status finalize(uint64_t max_bytes = uint64_t{8} << 30);

  // From a bundle: kcore segments and Snapshot records from time 0, Load
  // records from their time, Guard/Unregister copies where nothing else
  // covers them, unmaps from ksymbol unregister / module unload, every poke.
  static Result<std::unique_ptr<VersionedImage>> from_bundle(const Bundle& bundle);

  const std::vector<TextVersion>& versions() const { return versions_; }
  // Version indices ordered by begin time (layer order within a time).
  const std::vector<uint32_t>& by_begin() const { return by_begin_; }
  const ImageStats& stats() const { return stats_; }
  pt_image_section_cache* iscache() const { return iscache_; }
  // A section cache of its own for one more decoder thread, with the same
  // isids as iscache(): libipt's sections, and the block cache each keeps,
  // are shared by every decoder of one cache, and two threads decoding the
  // same text through them ran slower together than one alone. The caller
  // frees it (pt_iscache_free) after every image that uses it.
  Result<pt_image_section_cache*> make_thread_iscache() const;
  // The bytes of a version (valid after finalize).
  const uint8_t* data(const TextVersion& v) const { return data_.data() + v.data_offset; }
  // Version index for a libipt isid, or -1.
  int version_of_isid(int isid) const;
  // Reads up to `len` bytes at `addr` as of `time`; returns how many.
  size_t read(uint64_t addr, uint64_t time, uint8_t* out, size_t len) const;

 private:
  struct Mapping {
    uint64_t start;
    std::vector<uint8_t> bytes;
    uint64_t begin, end;
    std::string origin;
  };
  struct Poke {
    uint64_t addr;
    std::vector<uint8_t> old_bytes, new_bytes;
    uint64_t time;
  };
  void apply_pokes(uint64_t quantum);
  Result<pt_image_section_cache*> fill_iscache(std::vector<int>& isids) const;
  uint32_t add_version(uint64_t start, const uint8_t* bytes, uint64_t size, uint64_t begin, uint64_t end,
                       uint32_t mapping, bool overlay, const std::string& origin);
  std::vector<Mapping> mappings_;
  std::vector<Poke> pokes_;
  std::vector<TextVersion> versions_;
  std::vector<uint32_t> by_begin_;
  std::vector<uint8_t> data_;
  std::vector<int> isid_to_version_;
  ImageStats stats_;
  int memfd_ = -1;
  pt_image_section_cache* iscache_ = nullptr;
};

// A pt_image that follows one VersionedImage through time. `shift` moves
// every change by that many PT time units (candidate alignments).
class ImageCursor {
 public:
  // `iscache`: where the sections come from (default: image.iscache()).
  explicit ImageCursor(const VersionedImage& image, pt_image_section_cache* iscache = nullptr);
  ~ImageCursor();
  ImageCursor(const ImageCursor&) = delete;
  ImageCursor& operator=(const ImageCursor&) = delete;

  // The image as of `time` (rebuilds when moving backward or when the shift changes).
  Status seek(uint64_t time, int64_t shift = 0);
  // Moves forward to `time`, adding versions that began; returns how many.
  size_t advance(uint64_t time);
  // PT time of the next change, or kTimeForever.
  uint64_t next_change() const;
  pt_image* image() const { return image_; }
  uint64_t time() const { return time_; }
  uint64_t rebuilds() const { return rebuilds_; }

 private:
  uint64_t shifted(uint64_t t) const;
  const VersionedImage& vi_;
  pt_image_section_cache* iscache_;
  pt_image* image_ = nullptr;
  size_t next_ = 0;  // index into by_begin()
  uint64_t time_ = 0;
  int64_t shift_ = 0;
  bool built_ = false;
  uint64_t rebuilds_ = 0;
};

}  // namespace kt
