#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kthost/common/fd.h"
#include "kthost/common/strings.h"
#include "kthost/introspect/backends.h"

namespace kt {

Result<std::unique_ptr<MmapMemory>> MmapMemory::open(const std::string& path, PhysMap map) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return io_error("open RAM backing " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("fstat " + path, errno);
  uint64_t need = 0;
  for (const auto& r : map.regions()) need = std::max(need, r.backing_offset + r.size);
  if (static_cast<uint64_t>(st.st_size) < need)
    return Error(ErrorCode::InvalidInput, "RAM backing " + path + " holds " + std::to_string(st.st_size) +
                                              " bytes but the guest's RAM layout needs " + std::to_string(need));
  void* base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return io_error("mmap " + path, errno);
  auto mem = std::unique_ptr<MmapMemory>(new MmapMemory());
  mem->base_ = static_cast<const uint8_t*>(base);
  mem->size_ = static_cast<size_t>(st.st_size);
  mem->map_ = std::move(map);
  mem->path_ = path;
  return mem;
}

MmapMemory::~MmapMemory() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

const uint8_t* MmapMemory::view(uint64_t gpa, uint64_t len) const {
  auto off = map_.to_offset(gpa, len);
  if (!off || *off + len > size_) return nullptr;
  return base_ + *off;
}

Status MmapMemory::write_word(uint64_t gpa, uint64_t value) {
  KT_ASSIGN_OR_RETURN(uint64_t off, word_backing_offset(map_, gpa));
  if (off + 8 > size_) return Error(ErrorCode::OutOfRange, "guest-physical " + hex(gpa) + " is past the backing");
  if (!write_fd_.valid()) {
    write_fd_.reset(::open(path_.c_str(), O_WRONLY | O_CLOEXEC));
    if (!write_fd_.valid()) return io_error("open RAM backing " + path_ + " for writing", errno);
  }
  // One aligned 8-byte pwrite lands in one page of the shared backing.
  ssize_t n = ::pwrite(write_fd_.get(), &value, 8, static_cast<off_t>(off));
  if (n != 8) return io_error("pwrite RAM backing " + path_ + " at " + hex(off), n < 0 ? errno : EIO);
  return {};
}

Status MmapMemory::read(uint64_t gpa, void* out, size_t len) const {
  return map_.read_runs(gpa, out, len, [this, gpa](uint64_t off, uint8_t* dst, size_t n) -> Status {
    if (off + n > size_) return Error(ErrorCode::OutOfRange, "guest-physical " + hex(gpa) + " is past the backing");
    std::memcpy(dst, base_ + off, n);
    return {};
  });
}

}  // namespace kt
