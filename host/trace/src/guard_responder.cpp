#include "kthost/trace/guard_responder.h"

#include <cerrno>
#include <chrono>
#include <utility>

#include "kthost/common/strings.h"

namespace kt {

nlohmann::json hold_json(const HoldRecord& h) {
  nlohmann::json j = {{"id", h.id},           {"kind", h.kind},         {"cpu", h.cpu},
                      {"start", hex(h.start)}, {"end", hex(h.end)},     {"bytes", h.end - h.start},
                      {"guest_time", h.guest_time}, {"status", h.status}, {"copy_us", h.copy_us},
                      {"host_us", h.host_us},  {"seen_ns", h.seen_ns}, {"word_acked", h.word_acked},
                      {"polled", h.polled}};
  if (h.polled) {
    j["poll_sleep_us"] = h.poll_sleep_us;
    j["poll_lock_us"] = h.poll_lock_us;
  }
  if (!h.error.empty()) j["error"] = h.error;
  if (!h.word_error.empty()) j["word_error"] = h.word_error;
  return j;
}

Result<GuardResponder> GuardResponder::create(TextSaver& saver, AckSender send_ack, const std::string& holds_path,
                                              Notice notice) {
  FILE* holds = nullptr;
  if (!holds_path.empty()) {
    holds = std::fopen(holds_path.c_str(), "we");
    if (!holds) return io_error("create " + holds_path, errno);
  }
  return GuardResponder(saver, std::move(send_ack), holds, std::move(notice));
}

GuardResponder::GuardResponder(GuardResponder&& o) noexcept
    : saver_(o.saver_),
      send_ack_(std::move(o.send_ack_)),
      holds_(std::exchange(o.holds_, nullptr)),
      notice_(std::move(o.notice_)),
      word_error_shown_(o.word_error_shown_),
      totals_(o.totals_),
      polled_(std::move(o.polled_)),
      pending_(std::move(o.pending_)) {}

GuardResponder::~GuardResponder() {
  if (holds_) std::fclose(holds_);
}

namespace {
constexpr size_t kMaxPolled = 4096;
// About 50k holds' lines; the main thread takes them once a second (at
// most about 1.2 s apart), so this is only reached when it is stuck.
constexpr size_t kMaxPendingBytes = 16u << 20;
}

HoldRecord GuardResponder::answer(const SidebandEvent& ev, const GuardNoticeEvent& notice, const AckSender& send_ack) {
  auto t0 = std::chrono::steady_clock::now();
  auto polled = polled_.find(notice.id);
  if (polled != polled_.end()) {  // saved from the mirror already: the channel ack only
    HoldRecord h;
    h.id = notice.id;
    h.status = polled->second;
    polled_.erase(polled);
    if (Status ack = send_ack ? send_ack(notice.id, h.status) : Status(Error(ErrorCode::Unsupported, "no ack sender"));
        !ack)
      totals_.acks_failed++;
    return h;
  }
  HoldRecord h = saver_.on_guard_notice(ev, notice);
  Status ack = send_ack ? send_ack(notice.id, h.status) : Status(Error(ErrorCode::Unsupported, "no ack sender"));
  if (!ack) {
    if (h.error.empty()) h.error = "ack: " + ack.error().message;
    totals_.acks_failed++;
  }
  record(h, t0);
  return h;
}

HoldRecord GuardResponder::answer_polled(const SidebandEvent& ev, const GuardNoticeEvent& notice, MirrorPollTiming timing) {
  auto t0 = std::chrono::steady_clock::now();
  HoldRecord h = saver_.on_guard_notice(ev, notice);
  h.polled = true;
  h.poll_sleep_us = timing.sleep_us;
  h.poll_lock_us = timing.lock_us;
  polled_[notice.id] = h.status;
  while (polled_.size() > kMaxPolled) polled_.erase(polled_.begin());
  totals_.polled++;
  record(h, t0);
  return h;
}

void GuardResponder::record(HoldRecord& h, std::chrono::steady_clock::time_point t0) {
  h.seen_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count());
  h.host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (!h.word_error.empty() && !word_error_shown_) {
    word_error_shown_ = true;
    if (notice_) notice_("cannot store ack words (holds wait for the channel ack): " + h.word_error);
  }
  totals_.holds++;
  totals_.host_us_total += h.host_us;
  totals_.host_us_max = std::max(totals_.host_us_max, h.host_us);
  if (holds_) {
    std::string line = hold_json(h).dump();
    if (pending_.size() + line.size() + 1 > kMaxPendingBytes) {
      totals_.lines_dropped++;
      return;
    }
    pending_ += line;
    pending_ += '\n';
  }
}

void GuardResponder::write_lines(const std::string& lines) {
  if (!holds_) return;
  if (!lines.empty()) std::fwrite(lines.data(), 1, lines.size(), holds_);
  std::fflush(holds_);
}

}  // namespace kt
