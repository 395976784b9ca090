// File and socket helpers with errors that name the path.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kthost/common/fd.h"
#include "kthost/common/result.h"

namespace kt {

// Reads a whole file, refusing files larger than max_bytes.
Result<std::string> read_file(const std::string& path, size_t max_bytes = 64u << 20);
// Writes atomically (temp file + rename).
Status write_file_atomic(const std::string& path, const std::string& data);
// Connects a stream unix socket, retrying until the deadline (the peer may still be starting).
// Paths longer than sun_path are reached through their directory (/proc/self/fd/N/NAME).
Result<UniqueFd> connect_unix(const std::string& path, std::chrono::milliseconds timeout);
// Writes all bytes, waiting at most `timeout` in total.
Status write_all(int fd, const void* data, size_t len, std::chrono::milliseconds timeout);
// Reads exactly len bytes, waiting at most `timeout` in total. EOF is an error.
Status read_exact(int fd, void* data, size_t len, std::chrono::milliseconds timeout);

}  // namespace kt
