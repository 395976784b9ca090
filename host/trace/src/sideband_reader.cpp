#include "kthost/trace/sideband_reader.h"


namespace kt {

std::unique_ptr<SidebandReader> SidebandReader::start(SidebandChannel channel, Answer answer,
                                                      std::function<void()> at_start,
                                                      std::chrono::milliseconds poll_wait) {
  std::unique_ptr<SidebandReader> r(new SidebandReader(std::move(channel), std::move(answer), poll_wait));
  r->thread_ = std::thread([p = r.get(), at_start = std::move(at_start)] {
    if (at_start) at_start();
    p->run();
  });
  return r;
}

SidebandReader::SidebandReader(SidebandChannel channel, Answer answer, std::chrono::milliseconds poll_wait)
    : channel_(std::move(channel)), answer_(std::move(answer)), poll_wait_(poll_wait) {}

SidebandReader::~SidebandReader() { stop(); }

void SidebandReader::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SidebandReader::run() {
  const AckSender ack = [this](uint64_t id, uint32_t status) { return channel_.send_guard_ack(id, status); };
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    auto events = channel_.poll(poll_wait_);
    const HostArrival arrival = HostArrival::now();
    if (!events) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = events.take_error();
      cv_.notify_all();
      return;
    }
    if (events->empty()) continue;
    bool new_state = false;
    for (const auto& ev : *events) {
      if (const auto* n = std::get_if<GuardNoticeEvent>(&ev.body); n && answer_) answer_(ev, *n, ack);
      if (std::holds_alternative<StateDumpEvent>(ev.body)) new_state = true;
    }
    std::shared_ptr<const GuestState> state;
    if (new_state) state = std::make_shared<const GuestState>(channel_.decoder().state());
    std::lock_guard<std::mutex> lock(mu_);
    view_.stats = channel_.decoder().stats();
    view_.handshake_done = channel_.handshake_done();
    if (state) view_.state = std::move(state);
    queue_.push_back(SidebandBatch{std::move(*events), arrival});
    cv_.notify_all();
  }
}

Result<std::vector<SidebandBatch>> SidebandReader::take(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [this] { return !queue_.empty() || error_.has_value(); });
  std::vector<SidebandBatch> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  if (out.empty() && error_) return *error_;
  return out;
}

SidebandView SidebandReader::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

}  // namespace kt
