// kthost doctor: what this machine has and lacks for each PT source, and how to fix it.
#include <sys/stat.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "kthost/pt/requirements.h"
#include "kthost/vm/accelerator.h"

namespace kt::cli {
namespace {

const char* kName = "doctor";

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The hardware PT requirements (host/pt), then what the software source needs.
std::vector<RequirementCheck> run_checks() {
  std::vector<RequirementCheck> checks = check_hardware_pt_requirements(live_system_roots());
  bool qemu = exists("/usr/bin/qemu-system-x86_64");
  checks.push_back({"qemu-system-x86_64", qemu, qemu ? "/usr/bin/qemu-system-x86_64" : "absent",
                    "apt-get install qemu-system-x86"});
  return checks;
}

int run(const std::vector<std::string>& args) {
  Options opt;
  opt.flag("json", "print the checks as JSON");
  if (auto exit_status = parse_command_line(opt, kName, args)) return *exit_status;
  auto checks = run_checks();
  bool hardware = true;
  for (const auto& c : checks)
    if (!c.ok && c.name != "qemu-system-x86_64") hardware = false;
  bool software = checks.back().ok;
  std::string source = hardware ? "hardware (perf intel_pt on KVM vCPU threads)"
                                : software ? "software (the TCG plugin; QEMU without KVM)" : "none";
  AcceleratorChoice accel = choose_accelerator(live_system_roots());
  std::string accel_line = std::string(accelerator_name(accel.accel)) + " (" + accel.reason + ")";
  if (opt.has("json")) {
    nlohmann::json doc = {{"hardware_pt", hardware},
                          {"software_pt", software},
                          {"pt_source", source},
                          {"accelerator", accelerator_name(accel.accel)},
                          {"accelerator_reason", accel.reason},
                          {"kvm_flavour", accel.kvm.flavour()},
                          {"kvm_present_but_unusable", accel.kvm_present_but_unusable}};
    for (const auto& c : checks)
      doc["checks"].push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}, {"fix", c.ok ? "" : c.fix}});
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  for (const auto& c : checks) {
    std::printf("%-4s %-22s %s\n", c.ok ? "ok" : "NO", c.name.c_str(), c.detail.c_str());
    if (!c.ok) std::printf("     %-22s fix: %s\n", "", c.fix.c_str());
  }
  std::printf("\nKVM flavour: %s\nGuests run under: %s\n", accel.kvm.flavour().c_str(), accel_line.c_str());
  if (accel.kvm_present_but_unusable)
    std::printf("Note: /dev/kvm exists here but cannot run stock guests; kthost uses TCG.\n");
  std::printf("PT source: %s\n", source.c_str());
  return software || hardware ? 0 : 1;
}

CommandRegistration reg({kName, "check what this machine has for hardware and software PT", run});

}  // namespace
}  // namespace kt::cli
