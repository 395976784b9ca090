#include "kthost/vm/ram_backing.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string_view>

#include "kthost/common/strings.h"

namespace kt {

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
