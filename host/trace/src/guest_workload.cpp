#include "kthost/trace/guest_workload.h"
#include "kthost_shared.h"

#include <cctype>
#include <ctime>

namespace kt {

Result<std::unique_ptr<GuestWorkload>> GuestWorkload::start(const std::string& exec_socket,
                                                            const std::vector<std::string>& words,
                                                            std::chrono::milliseconds timeout) {
  std::string command;
  for (const auto& word : words) command += (command.empty() ? "" : " ") + word;
  if (command.empty()) return Error(ErrorCode::InvalidArgument, "no command given after --");
  if (exec_socket.empty()) return Error(ErrorCode::Unsupported, "the guest has no exec channel (" KTHOST_PORT_EXEC ")");
  KT_ASSIGN_OR_RETURN(GuestExec exec, GuestExec::connect(exec_socket, std::chrono::seconds(10)));
  auto w = std::unique_ptr<GuestWorkload>(new GuestWorkload(std::move(exec)));
  GuestWorkload* self = w.get();
  w->thread_ = std::thread([self, command, timeout] {
    self->result_ = self->exec_.run(command, timeout);
    self->done_.store(true, std::memory_order_release);
  });
  return w;
}

GuestWorkload::~GuestWorkload() {
  if (!done()) exec_.abort();
  if (thread_.joinable()) thread_.join();
}

int GuestWorkload::exit_status() const {
  if (!result_) return 1;
  if (result_->not_run) return 127;
  return result_->status >= 0 && result_->status <= 255 ? result_->status : 255;
}

std::string default_trace_dir(const std::string& name, std::chrono::system_clock::time_point when) {
  std::string safe;
  for (char c : name) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (safe.empty() || safe[0] == '.') safe = "trace" + safe;
  std::time_t t = std::chrono::system_clock::to_time_t(when);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return safe + "-" + stamp;
}

}  // namespace kt
