// LibvirtMonitor: QMP through virDomainQemuMonitorCommand. libvirt's call has
// no timeout of its own (it waits for the domain's job lock and for QEMU), so
// each command runs on a helper thread and the caller waits at most timeout_.
// On a timeout the helper thread is left to finish; it holds the Handle.
#include <libvirt/libvirt-qemu.h>
#include <signal.h>

#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "handle.h"

namespace kt {
namespace libvirt_detail {
namespace {
void ignore_error(void*, virErrorPtr) {}
}  // namespace

void ensure_libvirt_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    // libvirt writes to libvirtd's socket; when libvirtd has gone away that
    // write would kill the process with SIGPIPE instead of failing the call.
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
    virInitialize();
    virSetErrorFunc(nullptr, ignore_error);
  });
}

std::string last_error(const char* fallback) {
  const char* msg = virGetLastErrorMessage();
  if (!msg || !*msg || std::string(msg) == "no error") return fallback;
  return msg;
}

}  // namespace libvirt_detail

LibvirtMonitor::~LibvirtMonitor() = default;

Result<nlohmann::json> LibvirtMonitor::execute(const std::string& command, const nlohmann::json& arguments) {
  nlohmann::json request = {{"execute", command}};
  if (!arguments.empty()) request["arguments"] = arguments;
  struct Reply {
    bool ok = false;
    std::string text;  // QEMU's reply, or libvirt's error
  };
  auto promise = std::make_shared<std::promise<Reply>>();
  auto future = promise->get_future();
  std::thread([handle = handle_, promise, line = request.dump()] {
    Reply reply;
    char* result = nullptr;
    if (virDomainQemuMonitorCommand(handle->dom, line.c_str(), &result, VIR_DOMAIN_QEMU_MONITOR_COMMAND_DEFAULT) == 0 &&
        result) {
      reply.ok = true;
      reply.text = result;
    } else {
      reply.text = libvirt_detail::last_error();
    }
    std::free(result);
    promise->set_value(std::move(reply));
  }).detach();
  if (future.wait_for(timeout_) != std::future_status::ready)
    return Error(ErrorCode::Timeout, "QMP " + command + " through libvirt (domain " + handle_->name + "): no answer in " +
                                         std::to_string(timeout_.count()) + " ms");
  Reply reply = future.get();
  if (!reply.ok)
    return Error(ErrorCode::Protocol, "QMP " + command + " through libvirt (domain " + handle_->name + "): " + reply.text);
  nlohmann::json msg = nlohmann::json::parse(reply.text, nullptr, /*allow_exceptions=*/false);
  if (!msg.is_object())
    return Error(ErrorCode::Protocol, "QMP " + command + " through libvirt: reply is not a JSON object: " +
                                          reply.text.substr(0, 120));
  if (auto err = msg.find("error"); err != msg.end()) {
    return Error(ErrorCode::Protocol, "QMP " + command + " failed: " + qmp_error_text(*err));
  }
  auto ret = msg.find("return");
  if (ret == msg.end()) return Error(ErrorCode::Protocol, "QMP " + command + ": reply has no \"return\"");
  return *ret;
}

}  // namespace kt
