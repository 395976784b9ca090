#include "kthost/vm/accelerator.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kthost/common/io.h"
#include "kthost/common/strings.h"

namespace kt {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The flags line of the first processor in cpuinfo.
void read_cpu_flags(const std::string& path, KvmProbe& probe) {
  auto text = read_file(path, 16 << 20);
  if (!text) return;
  probe.cpu_readable = true;
  for (auto line : split(*text, '\n')) {
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || trim(line.substr(0, colon)) != "flags") continue;
    for (auto flag : split(trim(line.substr(colon + 1)), ' ')) {
      if (flag == "vmx") probe.cpu_vmx = true;
      if (flag == "svm") probe.cpu_svm = true;
    }
    return;
  }
}

}  // namespace

std::string KvmProbe::flavour() const {
  std::string out;
  for (auto [loaded, name] : {std::pair{kvm_intel, "kvm_intel"}, {kvm_amd, "kvm_amd"}, {kvm_pvm, "kvm_pvm"}}) {
    if (!loaded) continue;
    if (!out.empty()) out += "+";
    out += name;
  }
  return out.empty() ? "none" : out;
}

KvmProbe probe_kvm(const SystemRoots& roots) {
  KvmProbe probe;
  std::string dev = roots.dev + "/kvm";
  probe.dev_present = exists(dev);
  if (probe.dev_present) {
    int fd = ::open(dev.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      probe.dev_openable = true;
      ::close(fd);
    } else {
      probe.open_error = std::strerror(errno);
    }
  }
  read_cpu_flags(roots.proc + "/cpuinfo", probe);
  probe.kvm_intel = exists(roots.sys + "/module/kvm_intel");
  probe.kvm_amd = exists(roots.sys + "/module/kvm_amd");
  probe.kvm_pvm = exists(roots.sys + "/module/kvm_pvm");
  return probe;
}

const char* accelerator_name(Accelerator accel) { return accel == Accelerator::Kvm ? "kvm" : "tcg"; }

AcceleratorChoice choose_accelerator(const KvmProbe& kvm) {
  AcceleratorChoice c;
  c.kvm = kvm;
  if (!kvm.dev_present) {
    c.reason = "/dev/kvm is absent";
    return c;
  }
  if (!kvm.dev_openable) {
    c.reason = "/dev/kvm cannot be opened read-write (" + kvm.open_error + ")";
    return c;
  }
  bool intel = kvm.cpu_vmx && kvm.kvm_intel;
  bool amd = kvm.cpu_svm && kvm.kvm_amd;
  if (intel || amd) {
    c.accel = Accelerator::Kvm;
    c.reason = std::string(intel ? "the CPU has VMX and kvm_intel" : "the CPU has SVM and kvm_amd") +
               " is loaded, and /dev/kvm opens";
    return c;
  }
  c.kvm_present_but_unusable = true;
  std::string cpu = !kvm.cpu_readable ? "cpuinfo is unreadable"
                    : kvm.cpu_vmx     ? "the CPU has VMX but kvm_intel is not loaded"
                    : kvm.cpu_svm     ? "the CPU has SVM but kvm_amd is not loaded"
                                      : "the CPU shows neither VMX nor SVM";
  if (kvm.kvm_pvm)
    c.reason = "/dev/kvm comes from kvm_pvm (PVM), which cannot boot a stock x86-64 kernel, and " + cpu;
  else
    c.reason = "/dev/kvm opens (KVM flavour: " + kvm.flavour() + ") but " + cpu +
               ", so it cannot run a stock x86-64 guest";
  return c;
}

AcceleratorChoice choose_accelerator(const SystemRoots& roots) { return choose_accelerator(probe_kvm(roots)); }

std::string explain_silent_kvm_guest(const AcceleratorChoice& choice) {
  if (choice.kvm_present_but_unusable)
    return "this host's KVM cannot run a stock kernel: " + choice.reason + "; use TCG (--accel tcg or auto)";
  return "the guest kernel may not print on the serial console (console=ttyS0 missing?), or KVM is stuck "
         "(KVM flavour " + choice.kvm.flavour() + "); try --accel tcg to tell the two apart";
}

}  // namespace kt
