// PtStream: a PT stream as a read-only file mapping or an owned copy, with
// kPtStreamSlack zero bytes after its end.
#include "kthost/bundle/pt_stream.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace kt {

namespace {

// A file cut short by someone else while it is mapped makes a read of its
// lost pages raise SIGBUS. The mapped ranges are kept here, so that the
// handler can name the file and end the process with a clear error (status
// 2) instead of a crash. Lock-free: the handler only loads.
struct MappedFile {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[240] = {};
};
MappedFile g_mapped[64];
struct sigaction g_previous_sigbus;

void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void on_sigbus(int, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const auto& m : g_mapped) {
    const uintptr_t b = m.begin.load(std::memory_order_acquire), e = m.end.load(std::memory_order_acquire);
    if (b == 0 || addr < b || addr >= e) continue;
    char offset[24];
    size_t i = sizeof offset;
    offset[--i] = 0;
    uintptr_t v = addr - b;
    do offset[--i] = static_cast<char>('0' + v % 10); while ((v /= 10) != 0 && i > 0);
    put("kthost: ");
    put(m.path);
    put(": the file was cut short while it was being read (its byte at offset ");
    put(offset + i);
    put(" is gone): something changed the bundle under the reader\n");
    ::_exit(2);
  }
  // Not a mapped bundle file: the fault is not ours to explain. The earlier
  // disposition takes it, raised again (and, for a fault, when the faulting
  // instruction runs again).
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);
  ::raise(SIGBUS);
}

// The slot of a mapping of [begin, end) (-1: none free; the mapping then
// goes without a clear error on truncation).
int watch_mapping(const uint8_t* begin, size_t bytes, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
  for (int i = 0; i < static_cast<int>(std::size(g_mapped)); ++i) {
    auto& m = g_mapped[i];
    if (m.used.exchange(true, std::memory_order_acq_rel)) continue;
    const size_t n = std::min(path.size(), sizeof m.path - 1);
    std::memcpy(m.path, path.data(), n);
    m.path[n] = 0;
    m.end.store(reinterpret_cast<uintptr_t>(begin) + bytes, std::memory_order_release);
    m.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_release);
    return i;
  }
  return -1;
}

void unwatch_mapping(int slot) {
  if (slot < 0) return;
  auto& m = g_mapped[slot];
  m.begin.store(0, std::memory_order_release);
  m.end.store(0, std::memory_order_release);
  m.used.store(false, std::memory_order_release);
}

}  // namespace

struct PtStream::Storage {
  std::vector<uint8_t> owned;  // a copy, with the slack as capacity
  void* area = nullptr;        // a mapping: the file's whole pages, then anonymous pages
  size_t area_bytes = 0;
  int watch = -1;              // its slot among the mapped files the SIGBUS handler names
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    unwatch_mapping(watch);
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
  if (whole != 0) s->watch = watch_mapping(base, whole, path);
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
