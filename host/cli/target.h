// The guest a command works on: a VM description plus a monitor, from a
// launcher's vm.json (--vm FILE: QMP over its socket) or, later, a libvirt
// domain (--domain NAME).
#pragma once

#include <memory>
#include <string>

#include "command.h"
#include "kthost/vm/monitor.h"
#include "kthost/vm/vm_description.h"

namespace kt::cli {

struct Target {
  VmDescription vm;
  std::unique_ptr<Monitor> monitor;
  std::string label;  // for messages: the vm.json path or the domain name
};

// Declares the options open_target reads (--vm FILE).
void target_options(Options& opt);
// Opens what the options name. Errors: InvalidArgument when none is given.
Result<Target> open_target(const Options& opt);

}  // namespace kt::cli
