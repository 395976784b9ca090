// QmpClient against a scripted QMP peer on a real unix socket.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "kthost/common/fd.h"
#include "kthost/vm/qmp_client.h"

namespace kt {
namespace {

// A one-connection peer: sends the greeting, then for each request line calls
// `script` with the line and writes back whatever it returns.
class ScriptedQmpPeer {
 public:
  explicit ScriptedQmpPeer(std::function<std::string(const std::string&)> script) : script_(std::move(script)) {
    path_ = "/tmp/kthost-qmp-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + ".sock";
    ::unlink(path_.c_str());
    listen_.reset(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    EXPECT_EQ(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_.get(), 1), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedQmpPeer() {
    ::shutdown(listen_.get(), SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  void serve() {
    UniqueFd conn(::accept(listen_.get(), nullptr, nullptr));
    if (!conn.valid()) return;
    send(conn.get(), R"({"QMP": {"version": {"qemu": {"major": 7}}, "capabilities": []}})" "\r\n");
    std::string buf;
    char c;
    while (::read(conn.get(), &c, 1) == 1) {
      if (c != '\n') {
        buf.push_back(c);
        continue;
      }
      std::string reply = script_(buf);
      buf.clear();
      if (reply == "CLOSE") return;
      send(conn.get(), reply);
    }
  }
  static void send(int fd, const std::string& s) { ASSERT_EQ(::write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size())); }

  std::function<std::string(const std::string&)> script_;
  std::string path_;
  UniqueFd listen_;
  std::thread thread_;
  static inline int counter_ = 0;
};

std::string id_of(const std::string& line) {
  auto j = nlohmann::json::parse(line);
  return std::to_string(j["id"].get<uint64_t>());
}

TEST(QmpClient, MatchesRepliesAndQueuesInterleavedEvents) {
  ScriptedQmpPeer peer([](const std::string& line) -> std::string {
    std::string id = id_of(line);
    if (line.find("qmp_capabilities") != std::string::npos) return R"({"return": {}, "id": )" + id + "}\r\n";
    // An event and a stale reply arrive before the real one.
    return R"({"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}})" "\r\n"
           R"({"return": "stale", "id": 999})" "\r\n"
           R"({"return": {"status": "running"}, "id": )" + id + "}\r\n";
  });
  auto client = QmpClient::connect(peer.path(), std::chrono::seconds(5));
  ASSERT_TRUE(client) << client.error().message;
  auto status = client->execute("query-status");
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_EQ((*status)["status"], "running");
  auto events = client->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "STOP");
  EXPECT_TRUE(client->take_events().empty());
}

TEST(QmpClient, ErrorReplyBecomesProtocolErrorWithClassAndDescription) {
  ScriptedQmpPeer peer([](const std::string& line) -> std::string {
    std::string id = id_of(line);
    if (line.find("qmp_capabilities") != std::string::npos) return R"({"return": {}, "id": )" + id + "}\n";
    return R"({"error": {"class": "CommandNotFound", "desc": "The command nope has not been found"}, "id": )" + id + "}\n";
  });
  auto client = QmpClient::connect(peer.path(), std::chrono::seconds(5));
  ASSERT_TRUE(client);
  auto r = client->execute("nope");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Protocol);
  EXPECT_NE(r.error().message.find("CommandNotFound"), std::string::npos);
  EXPECT_NE(r.error().message.find("has not been found"), std::string::npos);
}

TEST(QmpClient, SilentPeerTimesOut) {
  ScriptedQmpPeer peer([](const std::string& line) -> std::string {
    if (line.find("qmp_capabilities") != std::string::npos) return R"({"return": {}, "id": )" + id_of(line) + "}\n";
    return "";  // never answers
  });
  auto client = QmpClient::connect(peer.path(), std::chrono::seconds(5));
  ASSERT_TRUE(client);
  client->set_timeout(std::chrono::milliseconds(200));
  auto start = std::chrono::steady_clock::now();
  auto r = client->execute("query-status");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(QmpClient, MalformedJsonAndClosedPeerAreClearErrors) {
  ScriptedQmpPeer peer([](const std::string& line) -> std::string {
    if (line.find("qmp_capabilities") != std::string::npos) return R"({"return": {}, "id": )" + id_of(line) + "}\n";
    if (line.find("first") != std::string::npos) return "{not json\n";
    return "CLOSE";
  });
  auto client = QmpClient::connect(peer.path(), std::chrono::seconds(5));
  ASSERT_TRUE(client);
  auto r = client->execute("first");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Protocol);
  EXPECT_NE(r.error().message.find("malformed JSON"), std::string::npos);
  auto r2 = client->execute("second");
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message.find("closed"), std::string::npos);
}

TEST(QmpClient, NonQmpSocketIsRejected) {
  ScriptedQmpPeer peer([](const std::string&) -> std::string { return ""; });
  // The peer's greeting is right, so instead connect to a path that does not exist.
  auto client = QmpClient::connect("/tmp/kthost-no-such-socket", std::chrono::milliseconds(100));
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, ErrorCode::Io);
  EXPECT_NE(client.error().message.find("/tmp/kthost-no-such-socket"), std::string::npos);
}

}  // namespace
}  // namespace kt
