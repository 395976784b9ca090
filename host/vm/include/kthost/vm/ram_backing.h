// Where a QEMU process keeps guest RAM: the shared backing kthost maps to read
// it. Found from /proc/PID/fd, by size; no QEMU or libvirt API is needed.
#pragma once

#include <cstdint>
#include <string>

#include "kthost/common/result.h"

namespace kt {

// Finds QEMU's memfd RAM backing: the fd of process `pid` whose link is
// "/memfd:..." with size `ram_size`. Returns /proc/<pid>/fd/N.
// Errors: NotPresent, Io.
Result<std::string> find_memfd_backing(int pid, uint64_t ram_size);
// Finds a file-backed RAM backing of QEMU `pid`: an open regular file (not a
// memfd) of exactly `ram_size` bytes. Returns its path, or /proc/<pid>/fd/N
// when the file was unlinked. Errors: NotPresent, Io.
Result<std::string> find_file_backing(int pid, uint64_t ram_size);

}  // namespace kt
