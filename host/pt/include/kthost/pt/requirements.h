// What a host needs for hardware PT of KVM guests, checked one by one, each
// with what was found and how to fix it. Used by `kthost doctor`.
#pragma once

#include <string>
#include <vector>

#include "kthost/common/system_roots.h"

namespace kt {

struct RequirementCheck {
  std::string name;
  bool ok = false;
  std::string detail;  // what was found
  std::string fix;     // how to fix it, when not ok
};

// In order: Intel CPU with PT, intel_pt PMU, PT in VMX operation, KVM that
// runs stock guests (the accelerator rule in kthost/vm/accelerator.h),
// kvm_intel pt_mode, perf_event_paranoid, KVM debugfs. Never fails: what
// cannot be read is reported as not ok, and says so.
std::vector<RequirementCheck> check_hardware_pt_requirements(const SystemRoots& roots);

}  // namespace kt
