// One CPU's raw PT bytes, as the decoders read them.
//
// A stream read from a bundle is a read-only mapping of its file, not a copy:
// the decoders touch it piece by piece and release() each piece's pages when
// done, so a process's resident memory holds the pieces in work, never the
// whole trace. A stream built in memory (a test's, a fuzzer's) owns a copy.
//
// Either way, kPtStreamSlack zero bytes follow the last byte: libipt 2.0.5
// reads one byte past the end of its buffer when a stream ends inside a PSB
// pattern (its PSB search; fuzz_decode_pt found it). A mapping's last partial
// page is copied into anonymous memory, so that what follows the stream's
// size is zero even where the file goes on (bytes past the manifest's size).
//
// A mapped file that someone else cuts short while it is read would fault
// (SIGBUS) on its lost pages: the first mapping installs a SIGBUS handler
// that names the file and the offset and ends the process with status 2
// (64 mappings at once are watched; a fault elsewhere goes to the handler
// that was there before).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

inline constexpr size_t kPtStreamSlack = 32;

class PtStream {
 public:
  PtStream();
  // Owns a copy of `bytes`, with the slack. Implicit: tests write {{0, bytes}}.
  PtStream(std::vector<uint8_t> bytes);  // NOLINT(google-explicit-constructor)

  // Maps [0, size) of the open file `fd` (which `path` names, for errors).
  // The file must hold at least `size` bytes; it is not read here.
  static Result<PtStream> map_file(int fd, const std::string& path, uint64_t size);

  const uint8_t* data() const { return bytes_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const uint8_t* begin() const { return bytes_; }
  const uint8_t* end() const { return bytes_ + size_; }
  uint8_t operator[](size_t i) const { return bytes_[i]; }
  bool mapped() const { return mapped_file_bytes_ != 0; }

  // Tells the kernel that [begin, end) will not be read soon: the whole
  // pages of a mapping inside it stop counting as resident memory (they are
  // read back from the page cache if touched again). Nothing for a copy.
  void release(uint64_t begin, uint64_t end) const;

 private:
  struct Storage;
  std::shared_ptr<const Storage> storage_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  size_t mapped_file_bytes_ = 0;  // the file-backed prefix release() may drop
};

using PtStreams = std::map<uint32_t, PtStream>;

// Calls release() on what lies behind a reader moving forward through a
// stream, a few MiB at a time, so a pass over a whole stream stays bounded.
class PtReleaser {
 public:
  explicit PtReleaser(const PtStream& stream) : stream_(stream) {}
  void reached(uint64_t offset) {
    if (offset >= done_ + kStep) {
      stream_.release(done_, offset);
      done_ = offset;
    }
  }
  ~PtReleaser() { stream_.release(done_, stream_.size()); }
  PtReleaser(const PtReleaser&) = delete;
  PtReleaser& operator=(const PtReleaser&) = delete;

 private:
  static constexpr uint64_t kStep = uint64_t{4} << 20;
  const PtStream& stream_;
  uint64_t done_ = 0;
};

}  // namespace kt
