#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

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

namespace {

// Scans QEMU's open descriptors for the RAM backing: the first whose link
// target `accept` takes, with a file of exactly `ram_size` bytes. `accept`
// returns the path to report, or "" to go on.
Result<std::string> scan_fds(int pid, uint64_t ram_size,
                             const std::function<std::string(const std::string& fd_path, const std::string& target)>& accept) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return io_error("opendir " + dir, errno);
  std::string found;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = dir + "/" + e->d_name;
    char target[4096];
    ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) != ram_size) continue;
    found = accept(path, target);
    if (!found.empty()) break;
  }
  ::closedir(d);
  return found;
}

}  // namespace

Result<std::string> find_memfd_backing(int pid, uint64_t ram_size) {
  KT_ASSIGN_OR_RETURN(std::string found, scan_fds(pid, ram_size, [](const std::string& path, const std::string& target) {
                        return starts_with(target, "/memfd:") ? path : std::string();
                      }));
  if (found.empty())
    return Error(ErrorCode::NotPresent, "QEMU pid " + std::to_string(pid) + " has no memfd of " +
                                            std::to_string(ram_size) + " bytes (is RAM shared?)");
  return found;
}

Result<std::string> find_file_backing(int pid, uint64_t ram_size) {
  KT_ASSIGN_OR_RETURN(std::string found, scan_fds(pid, ram_size, [](const std::string& path, const std::string& target) {
                        struct stat st {};
                        if (target[0] != '/' || starts_with(target, "/memfd:") || starts_with(target, "/dev/") ||
                            ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
                          return std::string();
                        // An unlinked file is still readable through the descriptor.
                        return std::string_view(target).ends_with(" (deleted)") ? path : target;
                      }));
  if (found.empty())
    return Error(ErrorCode::NotPresent, "QEMU pid " + std::to_string(pid) + " has no open file of " +
                                            std::to_string(ram_size) + " bytes (the RAM backing file)");
  return found;
}

}  // namespace kt
