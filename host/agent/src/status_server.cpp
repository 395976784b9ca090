#include "kthost/agent/status_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "kthost/common/fd.h"
#include "kthost/common/strings.h"

namespace kt {
namespace {

constexpr size_t kMaxRequest = 4096;

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<UniqueFd> listen_unix(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return Error(ErrorCode::InvalidArgument, "status socket path '" + sanitize_name(path) + "' is empty or too long");
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Error(ErrorCode::Io, errno_text("socket(AF_UNIX)"));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ::unlink(path.c_str());
  mode_t old = ::umask(0177);  // the socket is the owner's alone: 0600
  int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (rc != 0) return Error(ErrorCode::Io, errno_text("binding the status socket " + path));
  if (::listen(fd.get(), 16) != 0) return Error(ErrorCode::Io, errno_text("listen on " + path));
  return fd;
}

Result<UniqueFd> listen_tcp_loopback(const std::string& spec) {
  auto colon = spec.rfind(':');
  if (colon == std::string::npos) return Error(ErrorCode::InvalidArgument, "--metrics-listen takes HOST:PORT, not '" + sanitize_name(spec) + "'");
  std::string host = spec.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto port = parse_u64(spec.substr(colon + 1), 10);
  if (!port || *port == 0 || *port > 65535)
    return Error(ErrorCode::InvalidArgument, "--metrics-listen: '" + sanitize_name(spec) + "' has no port 1-65535");
  bool v6 = host == "::1";
  if (host == "localhost") host = "127.0.0.1";
  if (host != "127.0.0.1" && !v6)
    return Error(ErrorCode::InvalidArgument, "--metrics-listen: " + sanitize_name(host) +
                                                 " is not a loopback address (127.0.0.1, ::1, localhost): the "
                                                 "metrics are for the node's own monitoring");
  UniqueFd fd(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Error(ErrorCode::Io, errno_text("socket(AF_INET)"));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(*port));
    a.sin6_addr = in6addr_loopback;
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(*port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) return Error(ErrorCode::Io, errno_text("binding the metrics port " + spec));
  if (::listen(fd.get(), 16) != 0) return Error(ErrorCode::Io, errno_text("listen on " + spec));
  return fd;
}

void write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string http_response(int code, const char* reason, const char* type, const std::string& body) {
  return "HTTP/1.0 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

Result<StatusPath> parse_status_request(std::string_view request) {
  auto end = request.find('\n');
  if (end == std::string_view::npos) {
    if (request.size() >= kMaxRequest) return Error(ErrorCode::InvalidInput, "no request line in the first 4 KiB");
    return Error(ErrorCode::InvalidInput, "the request line is not complete");
  }
  std::string_view line = request.substr(0, end);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  auto words = split(line, ' ');
  if (words.size() != 3 || !starts_with(words[2], "HTTP/1."))
    return Error(ErrorCode::InvalidInput, "not an HTTP/1.x request line: '" + sanitize_name(line, 80) + "'");
  if (words[0] != "GET") return Error(ErrorCode::InvalidInput, "method " + sanitize_name(words[0], 16) + ": only GET is served");
  std::string_view path = words[1];
  if (auto q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  if (path == "/status" || path == "/") return StatusPath::Text;
  if (path == "/status.json") return StatusPath::Json;
  if (path == "/metrics") return StatusPath::Metrics;
  return Error(ErrorCode::InvalidInput, "unknown path " + sanitize_name(path, 80) + " (/status, /status.json, /metrics)");
}

struct StatusServer::Impl {
  std::string unix_path;
  std::vector<UniqueFd> listeners;
  UniqueFd wake_read, wake_write;
  std::function<AgentStatus()> status;
  std::thread thread;

  void serve(int client) {
    timeval tv{1, 0};
    ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string request;
    char buf[1024];
    while (request.size() < kMaxRequest && request.find('\n') == std::string::npos) {
      ssize_t n = ::recv(client, buf, std::min(sizeof buf, kMaxRequest - request.size()), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    auto path = parse_status_request(request);
    if (!path) return write_all(client, http_response(400, "Bad Request", "text/plain", path.error().message + "\n"));
    AgentStatus s = status();
    switch (*path) {
      case StatusPath::Text: return write_all(client, http_response(200, "OK", "text/plain; charset=utf-8", s.to_text()));
      case StatusPath::Json:
        return write_all(client, http_response(200, "OK", "application/json", s.to_json().dump(2) + "\n"));
      case StatusPath::Metrics:
        return write_all(client, http_response(200, "OK", "text/plain; version=0.0.4", s.to_prometheus()));
    }
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake_read.get(), POLLIN, 0});
      for (const auto& l : listeners) fds.push_back({l.get(), POLLIN, 0});
      int n = ::poll(fds.data(), fds.size(), 1000);
      if (n < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & POLLIN)) continue;
        UniqueFd client(::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC));
        if (client.valid()) serve(client.get());
      }
    }
  }
};

StatusServer::StatusServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<StatusServer>> StatusServer::start(const std::string& unix_path, const std::string& tcp_listen,
                                                          std::function<AgentStatus()> status) {
  auto impl = std::make_unique<Impl>();
  impl->status = std::move(status);
  KT_ASSIGN_OR_RETURN(UniqueFd unix_fd, listen_unix(unix_path));
  impl->unix_path = unix_path;
  impl->listeners.push_back(std::move(unix_fd));
  if (!tcp_listen.empty()) {
    KT_ASSIGN_OR_RETURN(UniqueFd tcp, listen_tcp_loopback(tcp_listen));
    impl->listeners.push_back(std::move(tcp));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Error(ErrorCode::Io, errno_text("pipe"));
  impl->wake_read = UniqueFd(pipe_fds[0]);
  impl->wake_write = UniqueFd(pipe_fds[1]);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(impl)));
}

StatusServer::~StatusServer() {
  char b = 1;
  if (::write(impl_->wake_write.get(), &b, 1) < 0) {}
  if (impl_->thread.joinable()) impl_->thread.join();
  ::unlink(impl_->unix_path.c_str());
}

Result<std::string> query_agent(const std::string& unix_path, const std::string& path) {
  sockaddr_un addr{};
  if (unix_path.size() >= sizeof addr.sun_path) return Error(ErrorCode::InvalidArgument, "socket path too long: " + unix_path);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Error(ErrorCode::Io, errno_text("socket(AF_UNIX)"));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, unix_path.data(), unix_path.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return Error(ErrorCode::Io, errno_text("no kthost agent answers on " + unix_path));
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  write_all(fd.get(), "GET " + path + " HTTP/1.0\r\n\r\n");
  std::string reply;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
    if (reply.size() > (64u << 20)) return Error(ErrorCode::LimitExceeded, "the agent's answer is over 64 MiB");
  }
  auto head_end = reply.find("\r\n\r\n");
  if (head_end == std::string::npos) return Error(ErrorCode::Protocol, "the agent on " + unix_path + " sent no HTTP answer");
  std::string head = reply.substr(0, head_end), body = reply.substr(head_end + 4);
  if (!starts_with(head, "HTTP/1.0 200"))
    return Error(ErrorCode::Protocol, "the agent answered '" + sanitize_name(head.substr(0, head.find('\r')), 80) + "': " +
                                          sanitize_name(body, 200));
  return body;
}

}  // namespace kt
