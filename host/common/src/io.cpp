#include "kthost/common/io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace kt {

using Clock = std::chrono::steady_clock;

Result<std::string> read_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return io_error("open " + path, errno);
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("read " + path, errno);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes)
      return Error(ErrorCode::LimitExceeded,
                   path + ": larger than the limit of " + std::to_string(max_bytes) + " bytes");
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status write_file_atomic(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return io_error("create " + tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write " + tmp, errno);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return io_error("fsync " + tmp, errno);
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) return io_error("rename to " + path, errno);
  return {};
}

Result<UniqueFd> connect_unix(const std::string& path, std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // A path longer than sun_path (108 bytes: a socket reached through
  // /proc/<pid>/root/...) is reached through its directory, held open.
  UniqueFd dir;
  std::string name = path;
  if (path.size() >= sizeof addr.sun_path) {
    auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0)
      return Error(ErrorCode::InvalidArgument, "socket path too long: " + path);
    dir = UniqueFd(::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) return io_error("open the directory of socket " + path, errno);
    name = "/proc/self/fd/" + std::to_string(dir.get()) + path.substr(slash);
    if (name.size() >= sizeof addr.sun_path)
      return Error(ErrorCode::InvalidArgument, "socket path too long, even its name alone: " + path);
  }
  std::memcpy(addr.sun_path, name.c_str(), name.size() + 1);
  auto deadline = Clock::now() + timeout;
  int last_errno = 0;
  do {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return io_error("socket", errno);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    last_errno = errno;
    if (last_errno != ENOENT && last_errno != ECONNREFUSED && last_errno != EAGAIN) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (Clock::now() < deadline);
  return io_error("connect " + path, last_errno);
}

static int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

Status write_all(int fd, const void* data, size_t len, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    int r = ::poll(&pfd, 1, remaining_ms(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error("poll", errno);
    }
    if (r == 0) return Error(ErrorCode::Timeout, "write timed out");
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return io_error("write", errno);
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return {};
}

Status read_exact(int fd, void* data, size_t len, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, remaining_ms(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error("poll", errno);
    }
    if (r == 0) return Error(ErrorCode::Timeout, "read timed out");
    ssize_t n = ::read(fd, p, len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return io_error("read", errno);
    }
    if (n == 0) return Error(ErrorCode::Protocol, "peer closed the connection");
    p += n;
    len -= static_cast<size_t>(n);
  }
  return {};
}

}  // namespace kt
