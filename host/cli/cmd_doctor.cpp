// kthost doctor: what this machine has and lacks for each PT source, and how to fix it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"

namespace kt::cli {
namespace {

const char* kName = "doctor";

struct Check {
  std::string name;
  bool ok = false;
  std::string detail;  // what was found
  std::string fix;     // how to fix it, when not ok
};

std::string first_line(const std::string& path) {
  auto text = read_file(path, 1 << 20);
  if (!text) return "";
  return std::string(trim(text->substr(0, text->find('\n'))));
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string cpu_vendor() {
  auto text = read_file("/proc/cpuinfo", 16 << 20);
  if (!text) return "";
  for (auto line : split(*text, '\n'))
    if (starts_with(line, "vendor_id")) return std::string(trim(line.substr(line.find(':') + 1)));
  return "";
}

// IA32_VMX_MISC (0x485) bit 14: Intel PT can be used in VMX operation.
int pt_in_vmx() {
  int fd = ::open("/dev/cpu/0/msr", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  uint64_t value = 0;
  ssize_t n = ::pread(fd, &value, sizeof value, 0x485);
  ::close(fd);
  if (n != sizeof value) return -1;
  return (value >> 14) & 1 ? 1 : 0;
}

std::vector<Check> run_checks() {
  std::vector<Check> checks;
  std::string vendor = cpu_vendor();
  checks.push_back({"Intel CPU", vendor == "GenuineIntel", vendor.empty() ? "unknown" : vendor,
                    "Intel PT exists only on Intel CPUs; use the software PT source (TCG) here"});
  bool pt = exists("/sys/bus/event_source/devices/intel_pt");
  checks.push_back({"intel_pt PMU", pt, pt ? "/sys/bus/event_source/devices/intel_pt" : "absent",
                    "needs an Intel CPU with PT and a kernel with CONFIG_PERF_EVENTS_INTEL_PT; in a VM the "
                    "hypervisor must pass PT through"});
  int vmx = pt_in_vmx();
  checks.push_back({"PT in VMX operation", vmx == 1,
                    vmx < 0 ? "unknown (cannot read MSR 0x485)" : (vmx ? "IA32_VMX_MISC[14] set" : "IA32_VMX_MISC[14] clear"),
                    vmx < 0 ? "modprobe msr, run as root" : "this CPU cannot trace guests with PT"});
  int kvm = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm >= 0) ::close(kvm);
  checks.push_back({"/dev/kvm", kvm >= 0, kvm >= 0 ? "usable" : (exists("/dev/kvm") ? "present, not openable" : "absent"),
                    "modprobe kvm_intel; add the user to group kvm; nested virtualisation in a VM"});
  std::string pt_mode = first_line("/sys/module/kvm_intel/parameters/pt_mode");
  checks.push_back({"kvm_intel pt_mode=0", pt_mode == "0", pt_mode.empty() ? "kvm_intel not loaded" : "pt_mode=" + pt_mode,
                    "modprobe -r kvm_intel && modprobe kvm_intel pt_mode=0 (system mode: host perf traces guests)"});
  std::string paranoid = first_line("/proc/sys/kernel/perf_event_paranoid");
  bool root = ::geteuid() == 0;
  bool paranoid_ok = root || (!paranoid.empty() && paranoid != "2" && paranoid != "3" && paranoid != "4");
  checks.push_back({"perf_event_paranoid", paranoid_ok,
                    "perf_event_paranoid=" + (paranoid.empty() ? std::string("?") : paranoid) + (root ? " (root)" : ""),
                    "run as root, or sysctl kernel.perf_event_paranoid=-1"});
  bool debugfs = exists("/sys/kernel/debug/kvm");
  checks.push_back({"KVM debugfs", debugfs, debugfs ? "/sys/kernel/debug/kvm" : "absent",
                    "mount -t debugfs none /sys/kernel/debug (needed for guest TSC offset and scaling)"});
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
  if (opt.has("json")) {
    nlohmann::json doc = {{"hardware_pt", hardware}, {"software_pt", software}, {"pt_source", source}};
    for (const auto& c : checks)
      doc["checks"].push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}, {"fix", c.ok ? "" : c.fix}});
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  for (const auto& c : checks) {
    std::printf("%-4s %-22s %s\n", c.ok ? "ok" : "NO", c.name.c_str(), c.detail.c_str());
    if (!c.ok) std::printf("     %-22s fix: %s\n", "", c.fix.c_str());
  }
  std::printf("\nPT source: %s\n", source.c_str());
  return software || hardware ? 0 : 1;
}

CommandRegistration reg({kName, "check what this machine has for hardware and software PT", run});

}  // namespace
}  // namespace kt::cli
