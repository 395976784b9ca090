// SidebandDecoder: a byte stream from the guest in, validated events out.
//
// The stream is untrusted. Garbage, truncated, oversized, corrupt or
// out-of-order frames never stop the decoder: each is counted, the most recent
// are kept with their stream offset and a reason, and decoding resumes at the
// next frame magic. Memory is bounded: at most one maximal frame is buffered,
// and a state dump may hold at most kMaxStateSymbols symbols.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "kthost/sideband/events.h"

struct ktp_frame;
struct ktp_message;
struct ktp_message_storage;

namespace kt {

struct DecoderStats {
  uint64_t bytes = 0;
  uint64_t frames = 0;
  uint64_t skipped_bytes = 0;  // bytes dropped while resynchronising
  uint64_t bad_magic = 0, bad_version = 0, bad_length = 0, bad_crc = 0, bad_type = 0, bad_payload = 0;
  uint64_t seq_gaps = 0;        // discontinuities in the guest's sequence numbers
  uint64_t frames_missing = 0;  // frames implied missing by those gaps
  uint64_t out_of_order = 0;    // a sequence number at or below the previous one
  uint64_t errors() const { return bad_magic + bad_version + bad_length + bad_crc + bad_type + bad_payload; }
};

struct DecodeError {
  uint64_t offset = 0;  // stream offset of the frame (since reset())
  std::string reason;
};

class SidebandDecoder {
 public:
  static constexpr size_t kMaxStateSymbols = 4u << 20;
  static constexpr size_t kMaxStateModules = 65536;
  static constexpr size_t kMaxStateBpf = 65536;
  static constexpr size_t kRecentErrors = 64;

  SidebandDecoder();
  ~SidebandDecoder();
  SidebandDecoder(SidebandDecoder&&) noexcept;
  SidebandDecoder& operator=(SidebandDecoder&&) noexcept;

  // Appends every event completed by these bytes to `out`.
  void feed(const uint8_t* data, size_t len, std::vector<SidebandEvent>* out);
  // A new connection: sequence numbers and partial frames start over.
  void reset();

  const DecoderStats& stats() const { return stats_; }
  const std::deque<DecodeError>& recent_errors() const { return errors_; }
  // The latest complete state dump.
  const GuestState& state() const { return state_; }
  const GuestClock& clock() const { return clock_; }
  // Set when the peer spoke another protocol version; the channel reports it and closes.
  bool version_mismatch() const { return version_mismatch_; }
  std::string version_error() const { return version_error_; }

 private:
  void frame_error(uint64_t offset, const std::string& reason);
  void handle_frame(const ::ktp_frame& frame, uint64_t offset, std::vector<SidebandEvent>* out);
  void check_seq(const ::ktp_frame& frame, uint64_t offset);
  // What each message means to the host; parsing is ktp_parse_message's.
  void on_message(const ::ktp_message& m, SidebandEvent ev, uint64_t offset, std::vector<SidebandEvent>* out);

  std::vector<uint8_t> buffer_;
  uint64_t buffer_offset_ = 0;  // stream offset of buffer_[0]
  DecoderStats stats_;
  std::deque<DecodeError> errors_;
  bool have_seq_ = false;
  uint64_t last_seq_ = 0;
  GuestState pending_, state_;
  bool in_dump_ = false;
  uint32_t dump_reason_ = 0;
  GuestClock clock_;
  bool version_mismatch_ = false;
  std::string version_error_;
  std::unique_ptr<::ktp_message> message_;  // the frame being handled, parsed
  std::unique_ptr<::ktp_message_storage> storage_;  // its arrays (about 80 KiB, allocated once)
};

}  // namespace kt
