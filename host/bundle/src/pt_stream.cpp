// PtStream: a PT stream as a read-only file mapping or an owned copy, with
// kPtStreamSlack zero bytes after its end.
#include "kthost/bundle/pt_stream.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace kt {

struct PtStream::Storage {
  std::vector<uint8_t> owned;  // a copy, with the slack as capacity
  void* area = nullptr;        // a mapping: the file's whole pages, then anonymous pages
  size_t area_bytes = 0;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (area) ::munmap(area, area_bytes);
  }
};

namespace {

size_t page_size() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

PtStream::PtStream() : PtStream(std::vector<uint8_t>{}) {}

PtStream::PtStream(std::vector<uint8_t> bytes) {
  auto s = std::make_shared<Storage>();
  const size_t n = bytes.size();
  s->owned = std::move(bytes);
  s->owned.resize(n + kPtStreamSlack, 0);  // allocated and zeroed...
  s->owned.resize(n);                      // ...and kept as capacity
  bytes_ = s->owned.data();
  size_ = n;
  storage_ = std::move(s);
}

Result<PtStream> PtStream::map_file(int fd, const std::string& path, uint64_t size) {
  if (size == 0) return PtStream();
  const size_t page = page_size();
  const size_t whole = static_cast<size_t>(size) / page * page;  // file pages mapped as they are
  const size_t tail = static_cast<size_t>(size) - whole;         // copied, then zeroes
  const size_t area_bytes = (static_cast<size_t>(size) + kPtStreamSlack + page - 1) / page * page;
  auto s = std::make_shared<Storage>();
  void* area = ::mmap(nullptr, area_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return io_error("map " + std::to_string(area_bytes) + " bytes for " + path, errno);
  s->area = area;
  s->area_bytes = area_bytes;
  auto* base = static_cast<uint8_t*>(area);
  if (whole != 0 &&
      ::mmap(base, whole, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED)
    return io_error("mmap " + path, errno);
  for (size_t done = 0; done < tail;) {
    ssize_t n = ::pread(fd, base + whole + done, tail - done, static_cast<off_t>(whole + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("read " + path, errno);
    if (n == 0) return Error(ErrorCode::InvalidInput, path + ": at offset " + std::to_string(whole + done) +
                                                          ": file shrank while being read");
    done += static_cast<size_t>(n);
  }
  if (::mprotect(base + whole, area_bytes - whole, PROT_READ) != 0) return io_error("mprotect " + path, errno);
  PtStream out;
  out.bytes_ = base;
  out.size_ = static_cast<size_t>(size);
  out.mapped_file_bytes_ = whole;
  out.storage_ = std::move(s);
  return out;
}

void PtStream::release(uint64_t begin, uint64_t end) const {
  if (mapped_file_bytes_ == 0) return;
  const uint64_t page = page_size();
  const uint64_t first = (begin + page - 1) / page * page;
  const uint64_t last = std::min<uint64_t>(end, mapped_file_bytes_) / page * page;
  if (first >= last) return;
  // Unmodified private file pages: dropped, and read back from the file if touched.
  ::madvise(const_cast<uint8_t*>(bytes_) + first, last - first, MADV_DONTNEED);
}

}  // namespace kt
