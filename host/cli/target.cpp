#include "target.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>

#include "kthost/vm/qmp_client.h"

namespace kt::cli {

void target_options(Options& opt) {
  opt.value("vm", "FILE", "VM description written by the launcher (vm.json)");
  opt.value("domain", "NAME", "libvirt domain to work on (instead of --vm)");
  opt.value("connect", "URI", "libvirt connection URI for --domain (default qemu:///system)");
}

void trace_session_options(Options& opt) {
  opt.value("backend", "NAME", "guest memory backend: auto (default), mmap, process");
  opt.value("pt", "SOURCE", "PT source: auto (hardware where doctor allows it, else the TCG plugin), hardware, software, none");
  opt.value("pt-psb", "N", "hardware PT: a PSB every 2^(11+N) bytes");
  opt.value("pt-mtc", "N", "hardware PT: MTC every 2^N crystal ticks (default 3); \"off\" for none");
  opt.value("pt-cyc", "N", "hardware PT: cycle-accurate mode with CYC threshold N");
  opt.flag("pt-no-tsc", "hardware PT: no TSC packets");
  opt.flag("no-guard", "do not answer ktguard: unloads are saved best effort from unregister events");
  opt.flag("no-ack-word", "answer holds only through the channel, not also by the ack word in guest RAM");
  opt.value("guard-nice", "N", "nice value of the threads that answer holds, -20..19 (default: the process's)");
  opt.value("guard-rt", "P", "SCHED_FIFO priority of the threads that answer holds, 0..99 (default 2; 0: normal scheduling)");
  opt.value("holder-boost", "P",
            "SCHED_FIFO priority of a vCPU thread while its guest waits on a hold, below --guard-rt (default: one below; "
            "0: never)");
  opt.value("max-pt", "SIZE", "end the trace once PT reaches SIZE (e.g. 4G; default: no limit)");
  opt.value("min-free", "SIZE", "end the trace once the bundle's filesystem has less free (default 1G; 0: no floor)");
}

TraceOptionWords trace_option_words(const Options& opt, const std::string& out_dir) {
  return {opt.get("backend"), opt.get("pt"),         opt.get("pt-psb"),         opt.get("pt-mtc"), opt.get("pt-cyc"),
          opt.has("pt-no-tsc"), opt.has("no-guard"), opt.has("no-ack-word"), out_dir,
          opt.get("guard-nice"), opt.get("guard-rt"), opt.get("holder-boost"), opt.get("max-pt"),
          opt.get("min-free")};
}

Status Target::check_alive() const {
  if (domain) return domain->check_alive();
  if (vm.pid > 0 && ::kill(vm.pid, 0) != 0 && errno == ESRCH)
    return Error(ErrorCode::NotPresent, "QEMU pid " + std::to_string(vm.pid) + " (" + label + ") has exited");
  return ok_status();
}

Result<Target> open_target(const Options& opt, TargetNeeds needs) {
  auto vm_path = opt.get("vm");
  auto domain_name = opt.get("domain");
  if (vm_path && domain_name)
    return Error(ErrorCode::InvalidArgument, "give either --vm FILE or --domain NAME, not both");
  if (opt.get("connect") && !domain_name) return Error(ErrorCode::InvalidArgument, "--connect needs --domain NAME");
  Target t;
  if (domain_name) {
    KT_ASSIGN_OR_RETURN(LibvirtDomain d, LibvirtDomain::open(opt.get_or("connect", ""), *domain_name));
    for (const auto& w : d.warnings()) std::fprintf(stderr, "kthost: warning: %s\n", w.c_str());
    for (const auto& n : d.notes()) std::fprintf(stderr, "kthost: %s\n", n.c_str());
    t.vm = d.description();
    t.monitor = d.monitor();
    t.label = "domain " + *domain_name;
    t.domain = std::make_shared<LibvirtDomain>(std::move(d));
    return t;
  }
  if (!vm_path) return Error(ErrorCode::InvalidArgument, "--vm FILE or --domain NAME is required");
  KT_ASSIGN_OR_RETURN(t.vm, VmDescription::load(*vm_path));
  if (needs.monitor) {
    KT_ASSIGN_OR_RETURN(QmpClient qmp, QmpClient::connect(t.vm.qmp));
    t.monitor = std::make_unique<QmpClient>(std::move(qmp));
  }
  t.label = *vm_path;
  return t;
}

}  // namespace kt::cli
