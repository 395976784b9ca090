#include "kthost/pt/requirements.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kthost/common/fd.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/pt/pmu.h"
#include "kthost/vm/accelerator.h"

namespace kt {
namespace {

constexpr uint32_t kMsrVmxMisc = 0x485;
constexpr unsigned kVmxMiscPtInVmx = 14;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string first_line(const std::string& path) {
  auto text = read_file(path, 1 << 16);
  if (!text) return "";
  return std::string(trim(std::string_view(*text).substr(0, text->find('\n'))));
}

struct CpuInfo {
  std::string vendor;
  bool intel_pt_flag = false;
  bool readable = false;
};

// The first processor's vendor_id and flags.
CpuInfo read_cpuinfo(const std::string& path) {
  CpuInfo info;
  auto text = read_file(path, 16 << 20);
  if (!text) return info;
  info.readable = true;
  bool have_flags = false;
  for (auto line : split(*text, '\n')) {
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    auto key = trim(line.substr(0, colon));
    auto value = trim(line.substr(colon + 1));
    if (key == "vendor_id" && info.vendor.empty()) info.vendor = sanitize_name(value, 64);
    if (key == "flags" && !have_flags) {
      have_flags = true;
      for (auto flag : split(value, ' '))
        if (flag == "intel_pt") info.intel_pt_flag = true;
    }
  }
  return info;
}

RequirementCheck check_cpu(const SystemRoots& roots) {
  CpuInfo cpu = read_cpuinfo(roots.proc + "/cpuinfo");
  RequirementCheck c{"Intel CPU with PT", false, "", ""};
  if (!cpu.readable) {
    c.detail = "unknown (cannot read " + roots.proc + "/cpuinfo)";
    c.fix = "mount /proc";
    return c;
  }
  bool intel = cpu.vendor == "GenuineIntel";
  c.ok = intel && cpu.intel_pt_flag;
  c.detail = (cpu.vendor.empty() ? std::string("unknown vendor") : cpu.vendor) +
             (cpu.intel_pt_flag ? ", intel_pt flag" : ", no intel_pt flag");
  c.fix = intel ? "this CPU (or the hypervisor this host runs in) does not expose Intel PT; "
                  "use the software PT source (TCG)"
                : "Intel PT exists only on Intel CPUs; use the software PT source (TCG) here";
  return c;
}

RequirementCheck check_pmu(const SystemRoots& roots) {
  std::string dir = roots.sys + "/bus/event_source/devices/intel_pt";
  RequirementCheck c{"intel_pt PMU", false, "", ""};
  auto pmu = PtPmu::load(dir);
  if (pmu) {
    c.ok = true;
    c.detail = dir + " (type " + std::to_string(pmu->type) + ")";
    return c;
  }
  c.detail = pmu.error().code == ErrorCode::Unsupported ? "absent" : pmu.error().message;
  c.fix = pmu.error().code == ErrorCode::Unsupported
              ? "needs an Intel CPU with PT and a kernel with CONFIG_PERF_EVENTS_INTEL_PT; in a VM the "
                "hypervisor must pass PT through"
              : "the kernel's PMU description is unreadable or malformed; check the file named above";
  return c;
}

// IA32_VMX_MISC bit 14: PT can be used in VMX operation. Without it the
// kernel stops PT at VMXON and AUX records carry PERF_AUX_FLAG_PARTIAL.
RequirementCheck check_pt_in_vmx(const SystemRoots& roots) {
  std::string path = roots.dev + "/cpu/0/msr";
  RequirementCheck c{"PT in VMX operation", false, "", ""};
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  uint64_t value = 0;
  ssize_t n = -1;
  int err = 0;
  if (fd.valid()) {
    n = ::pread(fd.get(), &value, sizeof value, kMsrVmxMisc);
    if (n < 0) err = errno;
  } else {
    err = errno;
  }
  if (n != static_cast<ssize_t>(sizeof value)) {
    c.detail = "unknown (cannot read MSR 0x485 from " + path + ": " +
               (err ? std::string(std::strerror(err)) : std::string("short read")) + ")";
    c.fix = "as root: modprobe msr, then run kthost doctor again, or `rdmsr 0x485` (msr-tools) and check bit 14";
    return c;
  }
  c.ok = (value >> kVmxMiscPtInVmx) & 1;
  c.detail = std::string("IA32_VMX_MISC[14] ") + (c.ok ? "set" : "clear") + " (MSR 0x485 = " + hex(value) + ")";
  c.fix = "this CPU cannot trace through VM entry; hardware PT of guests is impossible here";
  return c;
}

// The accelerator rule, not just an open /dev/kvm: a kvm_pvm host has one
// that cannot boot a stock guest, let alone trace it.
RequirementCheck check_kvm(const SystemRoots& roots) {
  AcceleratorChoice choice = choose_accelerator(roots);
  RequirementCheck c{"KVM for stock guests", choice.accel == Accelerator::Kvm, "", ""};
  c.detail = "flavour " + choice.kvm.flavour() + ": " + choice.reason;
  c.fix = choice.kvm_present_but_unusable
              ? "guests run under TCG here; hardware PT needs a host whose CPU shows VMX, with kvm_intel loaded"
              : "modprobe kvm_intel; add the user to group kvm; nested virtualisation in a VM";
  return c;
}

RequirementCheck check_pt_mode(const SystemRoots& roots) {
  std::string path = roots.sys + "/module/kvm_intel/parameters/pt_mode";
  std::string mode = first_line(path);
  RequirementCheck c{"kvm_intel pt_mode=0", mode == "0", "", ""};
  c.detail = mode.empty() ? (exists(roots.sys + "/module/kvm_intel") ? "pt_mode unreadable" : "kvm_intel not loaded")
                          : "pt_mode=" + sanitize_name(mode, 16);
  c.fix = "modprobe -r kvm_intel && modprobe kvm_intel pt_mode=0 (system mode: host perf traces guests)";
  return c;
}

RequirementCheck check_paranoid(const SystemRoots& roots) {
  std::string text = first_line(roots.proc + "/sys/kernel/perf_event_paranoid");
  RequirementCheck c{"perf_event_paranoid", false, "", ""};
  std::optional<long long> level;
  if (!text.empty()) {
    bool negative = text[0] == '-';
    auto v = parse_u64(std::string_view(text).substr(negative ? 1 : 0), 10);
    if (v && *v < 1000) level = negative ? -static_cast<long long>(*v) : static_cast<long long>(*v);
  }
  // Tracing the kernel (and KVM guests through it) needs level <= 1 without privileges.
  c.ok = roots.is_root || (level && *level <= 1);
  c.detail = "perf_event_paranoid=" + (level ? std::to_string(*level) : std::string("?")) +
             (roots.is_root ? " (root)" : "");
  c.fix = "run as root, or sysctl kernel.perf_event_paranoid=1 (or lower)";
  return c;
}

// debugfs mounted (per <proc>/mounts) and KVM's directory in it.
RequirementCheck check_debugfs(const SystemRoots& roots) {
  std::string debugfs = roots.sys + "/kernel/debug";
  RequirementCheck c{"KVM debugfs", false, "", ""};
  bool mounted = false;
  if (auto mounts = read_file(roots.proc + "/mounts", 4 << 20)) {
    for (auto line : split(*mounts, '\n')) {
      auto fields = split(line, ' ');
      if (fields.size() >= 3 && fields[1] == "/sys/kernel/debug" && fields[2] == "debugfs") mounted = true;
    }
  }
  bool kvm_dir = exists(debugfs + "/kvm");
  c.ok = kvm_dir;
  if (kvm_dir) {
    c.detail = debugfs + "/kvm";
  } else if (!mounted) {
    c.detail = "debugfs not mounted";
    c.fix = "mount -t debugfs none /sys/kernel/debug (needed for each vCPU's TSC offset and scaling)";
  } else {
    c.detail = "debugfs mounted, no kvm directory";
    c.fix = "load kvm (modprobe kvm_intel); the kvm directory appears with the module";
  }
  return c;
}

}  // namespace

std::vector<RequirementCheck> check_hardware_pt_requirements(const SystemRoots& roots) {
  return {check_cpu(roots),     check_pmu(roots),     check_pt_in_vmx(roots), check_kvm(roots),
          check_pt_mode(roots), check_paranoid(roots), check_debugfs(roots)};
}

}  // namespace kt
