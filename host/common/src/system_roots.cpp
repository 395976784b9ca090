#include "kthost/common/system_roots.h"

#include <unistd.h>

namespace kt {

SystemRoots live_system_roots() {
  SystemRoots roots;
  roots.is_root = ::geteuid() == 0;
  return roots;
}

}  // namespace kt
