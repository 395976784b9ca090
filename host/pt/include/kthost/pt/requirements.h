// What a host needs for hardware PT of KVM guests, checked one by one, each
// with what was found and how to fix it. Used by `kthost doctor`.
#pragma once

#include <string>
#include <vector>

namespace kt {

struct RequirementCheck {
  std::string name;
  bool ok = false;
  std::string detail;  // what was found
  std::string fix;     // how to fix it, when not ok
};

// Where the checks look; tests point these at fake trees.
struct SystemRoots {
  std::string proc = "/proc";
  std::string sys = "/sys";
  std::string dev = "/dev";
  bool is_root = false;  // effective uid 0 (perf_event_paranoid does not apply)
};

// The roots of this machine, with is_root from geteuid().
SystemRoots live_system_roots();

// In order: Intel CPU with PT, intel_pt PMU, PT in VMX operation, /dev/kvm,
// kvm_intel pt_mode, perf_event_paranoid, KVM debugfs. Never fails: what
// cannot be read is reported as not ok, and says so.
std::vector<RequirementCheck> check_hardware_pt_requirements(const SystemRoots& roots);

}  // namespace kt
