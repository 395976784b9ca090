#include "kthost/sideband/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "kthost/common/io.h"
#include "ktproto.h"

namespace kt {

Result<SidebandChannel> SidebandChannel::connect(const std::string& socket_path, std::chrono::milliseconds timeout,
                                                 bool guard) {
  SidebandChannel ch;
  ch.path_ = socket_path;
  ch.ack_flags_ = guard ? KTP_ACK_GUARD_ENABLED : 0;
  KT_ASSIGN_OR_RETURN(ch.fd_, connect_unix(socket_path, timeout));
  // Announce this connection: the guest's port may not have noticed that the
  // previous host left and this one arrived.
  uint8_t frame[KTP_HEADER_SIZE + 16];
  ktp_hello_ack hello{KTP_PROTO_MINOR, ch.ack_flags_};
  long len = ktp_encode_host_hello(frame, sizeof frame, ch.tx_seq_++, &hello);
  if (len < 0) return Error(ErrorCode::Protocol, "encode HOST_HELLO failed");
  KT_TRY(ch.send_frame(frame, static_cast<size_t>(len)));
  return ch;
}

Status SidebandChannel::send_frame(const uint8_t* frame, size_t len) {
  return write_all(fd_.get(), frame, len, std::chrono::seconds(2));
}

Status SidebandChannel::send_guard_ack(uint64_t id, uint32_t status) {
  uint8_t buf[KTP_HEADER_SIZE + 64];
  ktp_guard_ack ack{id, status};
  long n = ktp_encode_guard_ack(buf, sizeof buf, tx_seq_++, &ack);
  if (n < 0) return Error(ErrorCode::Protocol, std::string("encode GUARD_ACK: ") + ktp_status_name(static_cast<int>(n)));
  return send_frame(buf, static_cast<size_t>(n));
}

Result<std::vector<SidebandEvent>> SidebandChannel::poll(std::chrono::milliseconds wait) {
  std::vector<SidebandEvent> events;
  pollfd pfd{fd_.get(), POLLIN, 0};
  int r = ::poll(&pfd, 1, static_cast<int>(wait.count()));
  if (r < 0 && errno != EINTR) return io_error("poll " + path_, errno);
  if (r <= 0) return events;
  uint8_t buf[256 * 1024];
  // Drain what is there now, bounded so that one call cannot run forever.
  for (int rounds = 0; rounds < 64; ++rounds) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      return io_error("read " + path_, errno);
    }
    if (n == 0) {
      if (!events.empty()) return events;
      return Error(ErrorCode::Protocol, "sideband " + path_ + ": QEMU closed the channel (did the guest stop?)");
    }
    decoder_.feed(buf, static_cast<size_t>(n), &events);
    if (decoder_.version_mismatch()) {
      std::string msg = decoder_.version_error();
      uint8_t frame[KTP_HEADER_SIZE + KTP_MAX_STRING + 8];
      ktp_error err{{msg.data(), static_cast<uint16_t>(std::min<size_t>(msg.size(), KTP_MAX_STRING))}};
      long len = ktp_encode_error(frame, sizeof frame, tx_seq_++, &err);
      if (len > 0) (void)send_frame(frame, static_cast<size_t>(len));
      return Error(ErrorCode::Protocol, msg);
    }
    if (static_cast<size_t>(n) < sizeof buf) break;
  }
  for (const auto& ev : events) {
    if (std::holds_alternative<HelloEvent>(ev.body)) {
      // Every HELLO starts a connection from the guest's point of view: answer it.
      tx_seq_ = 0;
      uint8_t frame[KTP_HEADER_SIZE + 16];
      ktp_hello_ack ack{KTP_PROTO_MINOR, ack_flags_};
      long len = ktp_encode_hello_ack(frame, sizeof frame, tx_seq_++, &ack);
      if (len < 0) return Error(ErrorCode::Protocol, "encode HELLO_ACK failed");
      KT_TRY(send_frame(frame, static_cast<size_t>(len)));
      acked_ = true;
    }
  }
  return events;
}

}  // namespace kt
