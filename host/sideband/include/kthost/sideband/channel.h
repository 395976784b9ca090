// SidebandChannel: the host end of the guest's org.kthost.0 virtio-serial
// port (a unix socket served by QEMU). It decodes what the guest sends,
// answers the HELLO handshake, and refuses a peer of another protocol version
// with an ERROR frame and a clear error.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "kthost/common/fd.h"
#include "kthost/common/result.h"
#include "kthost/sideband/decoder.h"

namespace kt {

class SidebandChannel {
 public:
  // `guard`: this host answers GUARD_NOTICE (HELLO_ACK's KTP_ACK_GUARD_ENABLED),
  // so ktguest opens ktguard and the guest's frees wait for send_guard_ack.
  static Result<SidebandChannel> connect(const std::string& socket_path,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(10),
                                         bool guard = false);
  // Waits up to `wait` for bytes, decodes everything available and returns
  // the events completed. Errors: Protocol when the peer speaks another
  // version (after telling it so) or QEMU closed the socket; Io.
  Result<std::vector<SidebandEvent>> poll(std::chrono::milliseconds wait);
  Status send_guard_ack(uint64_t id, uint32_t status);

  const SidebandDecoder& decoder() const { return decoder_; }
  bool handshake_done() const { return acked_; }

 private:
  SidebandChannel() = default;
  Status send_frame(const uint8_t* frame, size_t len);

  UniqueFd fd_;
  std::string path_;
  SidebandDecoder decoder_;
  uint64_t tx_seq_ = 0;
  bool acked_ = false;
  uint32_t ack_flags_ = 0;
};

}  // namespace kt
