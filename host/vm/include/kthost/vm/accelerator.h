// The one rule that picks a guest's accelerator, used by ktvm,
// kthost-libvirt.sh (both through `kthost accel`), `kthost doctor` and
// `kthost trace`.
//
// KVM is chosen only where it can run a stock x86-64 guest: a CPU that shows
// VMX with kvm_intel loaded, or SVM with kvm_amd loaded, and a /dev/kvm that
// opens read-write. An open /dev/kvm alone proves nothing: kvm_pvm provides
// one on CPUs without VMX/SVM, and a stock kernel never boots under it.
// Everything else gets TCG, with the reason in words.
#pragma once

#include <string>

#include "kthost/common/system_roots.h"

namespace kt {

// What this machine's KVM is, as far as /proc, /sys and /dev show.
struct KvmProbe {
  bool dev_present = false;   // <dev>/kvm exists
  bool dev_openable = false;  // and opens read-write
  std::string open_error;     // strerror when it exists but does not open
  bool cpu_readable = false;  // <proc>/cpuinfo was read
  bool cpu_vmx = false;       // the first processor's flags
  bool cpu_svm = false;
  bool kvm_intel = false;  // <sys>/module/kvm_intel exists
  bool kvm_amd = false;
  bool kvm_pvm = false;

  // "kvm_intel", "kvm_amd", "kvm_pvm", "kvm_intel+kvm_pvm", ... or "none".
  std::string flavour() const;
};

// Never fails: what cannot be read counts as absent.
KvmProbe probe_kvm(const SystemRoots& roots);

enum class Accelerator { Kvm, Tcg };

const char* accelerator_name(Accelerator accel);  // "kvm" or "tcg"

struct AcceleratorChoice {
  Accelerator accel = Accelerator::Tcg;
  std::string reason;  // one sentence: why this accelerator
  KvmProbe kvm;
  // True where /dev/kvm opens but the rule says it cannot run a stock guest
  // (kvm_pvm, or no VMX/SVM): the case a user must be warned about.
  bool kvm_present_but_unusable = false;
};

AcceleratorChoice choose_accelerator(const KvmProbe& kvm);
AcceleratorChoice choose_accelerator(const SystemRoots& roots);

// Why a KVM guest printed nothing on its console for a long time, in words,
// naming the likely cause for this machine's KVM flavour.
std::string explain_silent_kvm_guest(const AcceleratorChoice& choice);

}  // namespace kt
