// Where code that inspects this machine looks for /proc, /sys and /dev.
// Tests point these at fake trees; everything else uses live_system_roots().
#pragma once

#include <string>

namespace kt {

struct SystemRoots {
  std::string proc = "/proc";
  std::string sys = "/sys";
  std::string dev = "/dev";
  bool is_root = false;  // effective uid 0 (perf_event_paranoid does not apply)
};

// The roots of this machine, with is_root from geteuid().
SystemRoots live_system_roots();

}  // namespace kt
