// kthost exec: run a shell command in the guest through the ktexec agent.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "command.h"
#include "target.h"
#include "kthost/vm/guest_exec.h"
#include "kthost/vm/vm_description.h"
#include "kthost_shared.h"

namespace kt::cli {
namespace {

constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;

Result<std::chrono::milliseconds> parse_timeout(const std::string& text) {
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > kMaxTimeoutSeconds)
    return Error(ErrorCode::InvalidArgument, "--timeout must be a number of seconds in (0, 604800], not '" + text + "'");
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

int run_exec(const std::vector<std::string>& args) {
  Options opts;
  target_options(opts);
  opts.value("timeout", "SECONDS", "kill the command in the guest after this long (default 60)");
  opts.flag("json", "print {status, output, truncated, timed_out, not_run} as JSON");
  opts.allow_rest("CMD...", "the command; its words are joined with spaces and run by /bin/sh -c");
  if (auto exit_status = parse_command_line(opts, "exec", args)) return *exit_status;
  if (opts.rest().empty()) return fail("exec", Error(ErrorCode::InvalidArgument, "no command given after --"));
  auto timeout = parse_timeout(opts.get_or("timeout", "60"));
  if (!timeout) return fail("exec", timeout.error());

  auto target = open_target(opts, TargetNeeds{.monitor = false});
  if (!target) return fail("exec", target.error());
  const VmDescription* vm = &target->vm;
  if (vm->exec_channel.empty())
    return fail("exec", Error(ErrorCode::Unsupported, target->label + " has no exec channel (" KTHOST_PORT_EXEC ")"));

  std::string command;
  for (const auto& word : opts.rest()) command += (command.empty() ? "" : " ") + word;

  auto exec = GuestExec::connect(vm->exec_channel, std::chrono::seconds(10));
  if (!exec) return fail("exec", exec.error());
  auto result = exec->run(command, *timeout);
  if (!result) return fail("exec", result.error());

  int exit_status = result->status >= 0 && result->status <= 255 ? result->status : 255;
  if (result->not_run) exit_status = 127;
  if (opts.has("json")) {
    nlohmann::json doc = {{"status", result->status},       {"output", result->output},
                          {"truncated", result->truncated}, {"timed_out", result->timed_out},
                          {"not_run", result->not_run}};
    // Guest output need not be UTF-8; replace rather than throw.
    std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
  } else {
    std::fwrite(result->output.data(), 1, result->output.size(), stdout);
    if (result->truncated) std::fprintf(stderr, "kthost exec: output truncated by the guest\n");
    if (result->timed_out)
      std::fprintf(stderr, "kthost exec: the command was killed after %s s\n",
                   opts.get_or("timeout", "60").c_str());
    if (result->not_run) std::fprintf(stderr, "kthost exec: the guest could not run the command\n");
  }
  std::fflush(stdout);
  return exit_status;
}

const CommandRegistration registration(Command{"exec", "run a shell command in the guest (ktexec channel)", run_exec});

}  // namespace
}  // namespace kt::cli
