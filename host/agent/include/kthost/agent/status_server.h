// The agent's status and metrics over HTTP/1.0, on a unix socket (mode 0600)
// and, if asked, on a loopback TCP port for Prometheus:
//   GET /status        text for people
//   GET /status.json   JSON
//   GET /metrics       Prometheus text exposition format 0.0.4
// One client at a time, each given 1 s to send at most 4 KiB of request.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kthost/agent/agent_status.h"
#include "kthost/common/result.h"

namespace kt {

enum class StatusPath { Text, Json, Metrics };

// The request line of an HTTP request ("GET /metrics HTTP/1.1"); the headers
// after it are ignored. Errors: InvalidInput naming what is wrong (not GET,
// an unknown path, no request line within 4 KiB). Untrusted bytes: fuzzed.
Result<StatusPath> parse_status_request(std::string_view request);

class StatusServer {
 public:
  // `tcp_listen` is "" or "HOST:PORT" with HOST 127.0.0.1, ::1 or localhost.
  // Errors: the socket cannot be bound (path, errno), a non-loopback address.
  static Result<std::unique_ptr<StatusServer>> start(const std::string& unix_path, const std::string& tcp_listen,
                                                     std::function<AgentStatus()> status);
  ~StatusServer();  // stops answering and removes the unix socket
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  struct Impl;

 private:
  explicit StatusServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A client: GET `path` on the agent's unix socket and return the body.
// Errors: Io (no agent listening there), Protocol (not a 200 answer).
Result<std::string> query_agent(const std::string& unix_path, const std::string& path);

}  // namespace kt
