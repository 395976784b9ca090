#include "kthost/vm/guest_exec.h"

#include <sys/socket.h>

#include <bit>
#include <cstring>
#include <random>

#include "kthost/common/io.h"
#include "ktexec_proto.h"

namespace kt {

static_assert(std::endian::native == std::endian::little, "the exec wire structs are copied as-is");
static_assert(sizeof(ktexec_request) == 16 && sizeof(ktexec_response) == 24);

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kHeaderSize = sizeof(ktexec_response);
// The guest needs a moment after its own timeout to kill, reap and answer.
constexpr std::chrono::milliseconds kAnswerGrace{10000};
// With no answer, the first reconnect after 1 s, then every 2, 4, ... 30 s.
constexpr std::chrono::milliseconds kFirstPoke{1000};
constexpr std::chrono::milliseconds kMaxPoke{30000};

std::string_view response_magic() {
  static const uint32_t magic = KTEXEC_RESPONSE_MAGIC;
  return {reinterpret_cast<const char*>(&magic), sizeof magic};
}

// Drops everything before the first magic; keeps a trailing partial magic.
void skip_to_magic(std::string_view& stream) {
  std::string_view magic = response_magic();
  size_t at = stream.find(magic);
  if (at != std::string_view::npos) {
    stream.remove_prefix(at);
    return;
  }
  size_t keep = std::min(stream.size(), magic.size() - 1);
  while (keep > 0 && stream.substr(stream.size() - keep) != magic.substr(0, keep)) --keep;
  stream.remove_prefix(stream.size() - keep);
}

}  // namespace

Result<std::optional<ExecResult>> decode_exec_response(std::string_view& stream, uint32_t want_id) {
  for (;;) {
    skip_to_magic(stream);
    if (stream.size() < kHeaderSize) return std::optional<ExecResult>();
    ktexec_response header;
    std::memcpy(&header, stream.data(), sizeof header);
    if (header.out_len > KTEXEC_MAX_OUTPUT) {
      stream.remove_prefix(sizeof header.magic);
      return Error(ErrorCode::Protocol, "exec response " + std::to_string(header.id) + " claims " +
                                            std::to_string(header.out_len) + " bytes of output (limit " +
                                            std::to_string(KTEXEC_MAX_OUTPUT) + ")");
    }
    if (stream.size() - kHeaderSize < header.out_len) return std::optional<ExecResult>();
    std::string_view body = stream.substr(kHeaderSize, header.out_len);
    stream.remove_prefix(kHeaderSize + header.out_len);
    if (header.id != want_id) continue;  // stale: answers a request of an earlier client
    ExecResult result;
    result.status = header.status;
    result.output.assign(body);
    result.truncated = (header.flags & KTEXEC_FLAG_TRUNCATED) != 0;
    result.timed_out = (header.flags & KTEXEC_FLAG_TIMED_OUT) != 0;
    result.not_run = (header.flags & KTEXEC_FLAG_NOT_RUN) != 0;
    return std::optional<ExecResult>(std::move(result));
  }
}

size_t exec_response_bytes_wanted(std::string_view stream) {
  if (stream.size() < kHeaderSize || stream.substr(0, 4) != response_magic()) {
    return stream.size() < kHeaderSize ? kHeaderSize - stream.size() : 1;
  }
  ktexec_response header;
  std::memcpy(&header, stream.data(), sizeof header);
  size_t frame = kHeaderSize + std::min<size_t>(header.out_len, KTEXEC_MAX_OUTPUT);
  return frame > stream.size() ? frame - stream.size() : 1;
}

Result<GuestExec> GuestExec::connect(const std::string& socket_path, std::chrono::milliseconds timeout) {
  auto fd = connect_unix(socket_path, timeout);
  if (!fd) return fd.error().with_context("exec channel");
  // A random first id: a response left over from an earlier client must not
  // match one of ours by accident.
  std::random_device random;
  GuestExec exec(std::move(*fd), static_cast<uint32_t>(random()));
  exec.socket_path_ = socket_path;
  return exec;
}

Result<ExecResult> GuestExec::run(const std::string& command, std::chrono::milliseconds timeout) {
  if (command.size() > KTEXEC_MAX_COMMAND)
    return Error(ErrorCode::InvalidArgument, "command is " + std::to_string(command.size()) +
                                                 " bytes; the exec channel takes at most " +
                                                 std::to_string(KTEXEC_MAX_COMMAND));
  if (command.find('\0') != std::string::npos)
    return Error(ErrorCode::InvalidArgument, "command contains a NUL byte");
  if (timeout.count() <= 0 || timeout > std::chrono::hours(24 * 30))
    return Error(ErrorCode::InvalidArgument, "exec timeout must be positive and under 30 days");

  uint32_t id = next_id_++;
  ktexec_request request{KTEXEC_REQUEST_MAGIC, id, static_cast<uint32_t>(timeout.count()),
                         static_cast<uint32_t>(command.size())};
  std::string frame(reinterpret_cast<const char*>(&request), sizeof request);
  frame += command;
  auto deadline = Clock::now() + timeout + kAnswerGrace;
  auto left = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return ms.count() > 0 ? ms : std::chrono::milliseconds(0);
  };
  if (auto st = write_all(fd_.get(), frame.data(), frame.size(), left()); !st)
    return st.error().with_context("sending exec request");

  // QEMU drops a virtio-serial control message when the guest has no buffer
  // for it. A lost "host connected" after a quick reconnect leaves the guest
  // believing no host is there: ktexec runs the request, and its answer blocks
  // until the next connect. So while no answer comes, reconnect (which tells
  // the guest again) and resend the same request, with backoff; ktexec answers
  // a repeated id from its cache and never runs a request twice.
  auto poke_after = kFirstPoke;
  auto next_poke = Clock::now() + poke_after;
  unsigned reconnects = 0;
  for (;;) {
    std::string_view view(pending_);
    auto decoded = decode_exec_response(view, id);
    pending_.erase(0, pending_.size() - view.size());
    if (!decoded) return decoded.take_error();
    if (decoded->has_value()) {
      (*decoded)->reconnects = reconnects;
      return std::move(**decoded);
    }
    // Read only what the current frame needs, so nothing of a later frame
    // is taken from the socket early.
    size_t want = exec_response_bytes_wanted(pending_);
    size_t old_size = pending_.size();
    pending_.resize(old_size + want);
    auto until_poke = std::chrono::duration_cast<std::chrono::milliseconds>(next_poke - Clock::now());
    bool poke_due = pending_.size() == want && !socket_path_.empty() && until_poke < left();
    auto st = read_exact(fd_.get(), pending_.data() + old_size, want,
                         poke_due ? std::max(until_poke, std::chrono::milliseconds(1)) : left());
    if (st) continue;
    pending_.resize(old_size);
    if (aborted_->load()) return Error(ErrorCode::Io, "exec request " + std::to_string(id) + " aborted");
    if (st.error().code != ErrorCode::Timeout) return st.error().with_context("reading exec response");
    if (left().count() == 0)
      return Error(ErrorCode::Timeout, "the guest did not answer exec request " + std::to_string(id) +
                                           " in time (is ktexec running?)");
    if (!poke_due) continue;
    if (aborted_->load()) return Error(ErrorCode::Io, "exec request " + std::to_string(id) + " aborted");
    auto fd = connect_unix(socket_path_, std::chrono::seconds(5));
    if (!fd) return fd.error().with_context("reconnecting the exec channel");
    fd_ = std::move(*fd);
    pending_.clear();
    ++reconnects;
    if (auto resent = write_all(fd_.get(), frame.data(), frame.size(), left()); !resent)
      return resent.error().with_context("resending exec request");
    poke_after = std::min(poke_after * 2, kMaxPoke);
    next_poke = Clock::now() + poke_after;
  }
}

void GuestExec::abort() {
  aborted_->store(true);
  ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace kt
