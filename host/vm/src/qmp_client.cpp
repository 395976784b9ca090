#include "kthost/vm/qmp_client.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "kthost/common/io.h"

namespace kt {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Result<QmpClient> QmpClient::connect(const std::string& socket_path, std::chrono::milliseconds timeout) {
  QmpClient client;
  client.path_ = socket_path;
  client.timeout_ = timeout;
  KT_ASSIGN_OR_RETURN(client.fd_, connect_unix(socket_path, timeout));
  auto deadline = Clock::now() + timeout;
  KT_ASSIGN_OR_RETURN(client.greeting_, client.read_message(deadline));
  if (!client.greeting_.is_object() || !client.greeting_.contains("QMP"))
    return Error(ErrorCode::Protocol, "QMP " + socket_path + ": no greeting (is this a QMP socket?)");
  auto caps = client.execute("qmp_capabilities");
  if (!caps) return caps.error().with_context("QMP " + socket_path);
  return client;
}

Result<json> QmpClient::read_message(Clock::time_point deadline) {
  while (true) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      json msg = json::parse(line, nullptr, false);
      if (msg.is_discarded())
        return Error(ErrorCode::Protocol, "QMP " + path_ + ": malformed JSON from QEMU: " + line.substr(0, 120));
      return msg;
    }
    if (buffer_.size() > kMaxMessageBytes)
      return Error(ErrorCode::LimitExceeded, "QMP " + path_ + ": message larger than " +
                                                 std::to_string(kMaxMessageBytes) + " bytes");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Error(ErrorCode::Timeout, "QMP " + path_ + ": no answer within the timeout");
    pollfd pfd{fd_.get(), POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(left));
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error("QMP poll", errno);
    }
    if (r == 0) continue;
    char buf[65536];
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return io_error("QMP read " + path_, errno);
    }
    if (n == 0) return Error(ErrorCode::Protocol, "QMP " + path_ + ": QEMU closed the connection");
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

Result<json> QmpClient::execute(const std::string& command, const json& arguments) {
  uint64_t id = next_id_++;
  json request = {{"execute", command}, {"id", id}};
  if (!arguments.empty()) request["arguments"] = arguments;
  std::string line = request.dump() + "\n";
  auto deadline = Clock::now() + timeout_;
  KT_TRY(write_all(fd_.get(), line.data(), line.size(), timeout_));
  while (true) {
    KT_ASSIGN_OR_RETURN(json msg, read_message(deadline));
    if (!msg.is_object()) return Error(ErrorCode::Protocol, "QMP " + path_ + ": message is not an object");
    if (msg.contains("event")) {
      if (events_.size() >= kMaxQueuedEvents) {
        events_.pop_front();
        ++dropped_events_;
      }
      events_.push_back(std::move(msg));
      continue;
    }
    auto mid = msg.find("id");
    if (mid == msg.end() || !mid->is_number_unsigned() || mid->get<uint64_t>() != id) continue;  // stale reply
    if (auto err = msg.find("error"); err != msg.end()) {
      return Error(ErrorCode::Protocol, "QMP " + command + " failed: " + qmp_error_text(*err));
    }
    auto ret = msg.find("return");
    if (ret == msg.end()) return Error(ErrorCode::Protocol, "QMP " + command + ": reply has no \"return\"");
    return *ret;
  }
}

std::deque<json> QmpClient::take_events() {
  std::deque<json> out;
  out.swap(events_);
  return out;
}

}  // namespace kt
