// The exec response decoder must cope with whatever the guest sends.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "ktexec_proto.h"
#include "kthost/vm/guest_exec.h"

namespace kt {
namespace {

std::string frame(uint32_t id, int32_t status, uint32_t flags, const std::string& output,
                  uint32_t out_len_override = UINT32_MAX) {
  ktexec_response header{KTEXEC_RESPONSE_MAGIC, id, status, flags,
                         out_len_override == UINT32_MAX ? static_cast<uint32_t>(output.size()) : out_len_override, 0};
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  return bytes + output;
}

TEST(GuestExecDecode, GoodFrame) {
  std::string data = frame(7, 3, KTEXEC_FLAG_TRUNCATED, "hello\n");
  std::string_view view(data);
  auto result = decode_exec_response(view, 7);
  ASSERT_TRUE(result.ok()) << result.error().message;
  ASSERT_TRUE(result->has_value());
  EXPECT_EQ((*result)->status, 3);
  EXPECT_EQ((*result)->output, "hello\n");
  EXPECT_TRUE((*result)->truncated);
  EXPECT_FALSE((*result)->timed_out);
  EXPECT_FALSE((*result)->not_run);
  EXPECT_TRUE(view.empty());
}

TEST(GuestExecDecode, FlagsMapToFields) {
  std::string data = frame(1, -1, KTEXEC_FLAG_NOT_RUN | KTEXEC_FLAG_TIMED_OUT, "");
  std::string_view view(data);
  auto result = decode_exec_response(view, 1);
  ASSERT_TRUE(result.ok() && result->has_value());
  EXPECT_EQ((*result)->status, -1);
  EXPECT_TRUE((*result)->not_run);
  EXPECT_TRUE((*result)->timed_out);
  EXPECT_FALSE((*result)->truncated);
}

TEST(GuestExecDecode, StaleIdSkipped) {
  std::string data = frame(4, 0, 0, "old") + frame(5, 0, 0, "new") + "KT";
  std::string_view view(data);
  auto result = decode_exec_response(view, 5);
  ASSERT_TRUE(result.ok() && result->has_value());
  EXPECT_EQ((*result)->output, "new");
  EXPECT_EQ(view, "KT");  // a partial magic stays for the next read
}

TEST(GuestExecDecode, OnlyStaleFramesNeedMore) {
  std::string data = frame(4, 0, 0, "old");
  std::string_view view(data);
  auto result = decode_exec_response(view, 5);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->has_value());
  EXPECT_TRUE(view.empty());
}

TEST(GuestExecDecode, GarbageBeforeMagic) {
  std::string data = std::string("\x00\xffKTgarbageKTR", 14) + frame(9, 0, 0, "ok");
  std::string_view view(data);
  auto result = decode_exec_response(view, 9);
  ASSERT_TRUE(result.ok() && result->has_value());
  EXPECT_EQ((*result)->output, "ok");
  EXPECT_TRUE(view.empty());
}

TEST(GuestExecDecode, GarbageOnlyIsConsumed) {
  std::string data(1000, 'x');
  std::string_view view(data);
  auto result = decode_exec_response(view, 1);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->has_value());
  EXPECT_TRUE(view.empty());
  EXPECT_EQ(exec_response_bytes_wanted(view), 24u);
}

TEST(GuestExecDecode, OversizedOutLenRejected) {
  std::string data = frame(2, 0, 0, "", KTEXEC_MAX_OUTPUT + 1);
  std::string_view view(data);
  auto result = decode_exec_response(view, 2);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ErrorCode::Protocol);
  EXPECT_EQ(view.size(), data.size() - 4);  // past the bad magic, ready to resync
}

TEST(GuestExecDecode, TruncatedFrameWaitsForMore) {
  std::string full = frame(3, 0, 0, "0123456789");
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::string part = full.substr(0, cut);
    std::string_view view(part);
    auto result = decode_exec_response(view, 3);
    ASSERT_TRUE(result.ok());
    EXPECT_FALSE(result->has_value()) << "cut " << cut;
    EXPECT_EQ(view.size(), cut) << "a partial frame must not be consumed";
    EXPECT_EQ(exec_response_bytes_wanted(view), cut < 24 ? 24 - cut : full.size() - cut);
  }
  std::string_view view(full);
  auto result = decode_exec_response(view, 3);
  ASSERT_TRUE(result.ok() && result->has_value());
  EXPECT_EQ((*result)->output, "0123456789");
}

// A FAKE exec channel (QEMU's socket with ktexec behind it) whose guest
// missed the first connect: it takes the request on the first connection and
// never answers there, then answers the resent request on the second.
TEST(GuestExecRun, ReconnectsAndResendsWhenTheGuestMissedTheConnect) {
  std::string path = "/tmp/kthost-exec-test-" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());
  int server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(server, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(server, 4), 0);
  std::vector<uint32_t> ids;
  std::thread guest([&] {
    auto read_request = [&](int fd) {
      ktexec_request req{};
      if (::recv(fd, &req, sizeof req, MSG_WAITALL) != static_cast<ssize_t>(sizeof req)) return req;
      std::string cmd(req.cmd_len, '\0');
      (void)::recv(fd, cmd.data(), cmd.size(), MSG_WAITALL);
      ids.push_back(req.id);
      return req;
    };
    int first = ::accept(server, nullptr, nullptr);
    read_request(first);  // ... and no answer on this connection
    int second = ::accept(server, nullptr, nullptr);
    ktexec_request req = read_request(second);
    std::string answer = frame(req.id, 3, 0, "hello\n");
    (void)::send(second, answer.data(), answer.size(), MSG_NOSIGNAL);
    ::usleep(200000);
    ::close(first);
    ::close(second);
  });
  auto exec = GuestExec::connect(path, std::chrono::seconds(2));
  ASSERT_TRUE(exec) << exec.error().message;
  auto start = std::chrono::steady_clock::now();
  auto r = exec->run("echo hello", std::chrono::seconds(20));
  guest.join();
  ::close(server);
  ::unlink(path.c_str());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 3);
  EXPECT_EQ(r->output, "hello\n");
  EXPECT_EQ(r->reconnects, 1u);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], ids[1]) << "the resent request must carry the same id, so ktexec does not run it twice";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace kt
