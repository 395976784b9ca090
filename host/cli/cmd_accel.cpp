// kthost accel: the accelerator this machine's guests get, and why. ktvm and
// kthost-libvirt.sh ask this command, so the rule lives in one place
// (host/vm accelerator.h). The first word of the plain output is the answer.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "kthost/vm/accelerator.h"

namespace kt::cli {
namespace {

const char* kName = "accel";

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.flag("json", "print the choice and what was found as JSON");
  if (auto exit_status = parse_command_line(opt, kName, args)) return *exit_status;
  AcceleratorChoice c = choose_accelerator(live_system_roots());
  if (opt.has("json")) {
    nlohmann::json doc = {{"accel", accelerator_name(c.accel)},
                          {"reason", c.reason},
                          {"kvm_flavour", c.kvm.flavour()},
                          {"dev_kvm", c.kvm.dev_present ? (c.kvm.dev_openable ? "opens" : "present") : "absent"},
                          {"cpu_vmx", c.kvm.cpu_vmx},
                          {"cpu_svm", c.kvm.cpu_svm},
                          {"kvm_present_but_unusable", c.kvm_present_but_unusable},
                          {"silent_guest_hint", explain_silent_kvm_guest(c)}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%s: %s\n", accelerator_name(c.accel), c.reason.c_str());
  }
  return 0;
}

CommandRegistration reg({kName, "say which accelerator guests get here (kvm or tcg) and why", run});

}  // namespace
}  // namespace kt::cli
