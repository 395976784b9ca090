// The guest a command works on: a VM description plus a monitor, from a
// launcher's vm.json (--vm FILE: QMP over its socket) or a libvirt domain
// (--domain NAME [--connect URI]: everything from libvirt, QMP through
// virDomainQemuMonitorCommand).
#pragma once

#include <memory>
#include <string>

#include "command.h"
#include "kthost/libvirt/libvirt_domain.h"
#include "kthost/trace/trace_session.h"
#include "kthost/vm/monitor.h"
#include "kthost/vm/vm_description.h"

namespace kt::cli {

struct Target {
  VmDescription vm;
  std::unique_ptr<Monitor> monitor;
  std::string label;  // for messages: the vm.json path or "domain NAME"
  // Set for --domain: state, pause/resume and check_alive() through libvirt.
  std::shared_ptr<LibvirtDomain> domain;

  // Ok while the guest can still be traced. For --domain: libvirtd answers
  // and the domain runs (see LibvirtDomain::check_alive); for --vm: the QEMU
  // process exists.
  Status check_alive() const;
};

// Declares the options open_target reads (--vm FILE, --domain NAME, --connect URI).
void target_options(Options& opt);

struct TargetNeeds {
  bool monitor = true;  // false: no QMP connection is made (Target::monitor stays null for --vm)
};

// Opens what the options name. For --domain it prints, on stderr, what the
// domain lacks with the XML lines to add (shared RAM: kthost falls back to
// process memory; the org.kthost.0 channel). Errors: InvalidArgument when
// neither or both of --vm and --domain are given; libvirt's and QMP's errors.
Result<Target> open_target(const Options& opt, TargetNeeds needs = {});

// The options every front end of a TraceSession shares (--backend, --pt and
// the hardware PT settings, --no-guard, --no-ack-word), and their words.
void trace_session_options(Options& opt);
TraceOptionWords trace_option_words(const Options& opt, const std::string& out_dir);

}  // namespace kt::cli
