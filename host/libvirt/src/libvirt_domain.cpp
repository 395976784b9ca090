#include "kthost/libvirt/libvirt_domain.h"

#include "kthost/vm/process_namespace.h"
#include "kthost/vm/ram_backing.h"

#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "handle.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost_shared.h"

namespace kt {
namespace {

using libvirt_detail::Handle;
using libvirt_detail::last_error;

DomainState to_state(int s) {
  switch (s) {
    case VIR_DOMAIN_NOSTATE: return DomainState::NoState;
    case VIR_DOMAIN_RUNNING: return DomainState::Running;
    case VIR_DOMAIN_BLOCKED: return DomainState::Blocked;
    case VIR_DOMAIN_PAUSED: return DomainState::Paused;
    case VIR_DOMAIN_SHUTDOWN: return DomainState::Shutdown;
    case VIR_DOMAIN_SHUTOFF: return DomainState::Shutoff;
    case VIR_DOMAIN_CRASHED: return DomainState::Crashed;
    case VIR_DOMAIN_PMSUSPENDED: return DomainState::PmSuspended;
    default: return DomainState::Unknown;
  }
}

// Why a domain is shut off or crashed, from virDomainGetState's reason.
std::string stop_reason_words(int state, int reason) {
  if (state == VIR_DOMAIN_SHUTOFF) {
    switch (reason) {
      case VIR_DOMAIN_SHUTOFF_SHUTDOWN: return "shut down";
      case VIR_DOMAIN_SHUTOFF_DESTROYED: return "destroyed";
      case VIR_DOMAIN_SHUTOFF_CRASHED: return "crashed";
      case VIR_DOMAIN_SHUTOFF_MIGRATED: return "migrated away";
      case VIR_DOMAIN_SHUTOFF_SAVED: return "saved";
      case VIR_DOMAIN_SHUTOFF_FAILED: return "failed to start";
      case VIR_DOMAIN_SHUTOFF_FROM_SNAPSHOT: return "restored from a snapshot";
      case VIR_DOMAIN_SHUTOFF_DAEMON: return "stopped by libvirtd";
      default: return "";
    }
  }
  if (state == VIR_DOMAIN_CRASHED && reason == VIR_DOMAIN_CRASHED_PANICKED) return "guest panic";
  return "";
}

}  // namespace

bool libvirt_uri_is_local(const std::string& uri) {
  auto p = uri.find("://");
  if (p == std::string::npos) return false;
  std::string scheme = uri.substr(0, p);
  std::string rest = uri.substr(p + 3);
  if (scheme.find('+') != std::string::npos && scheme != "qemu+unix") return false;
  return rest.empty() || rest[0] == '/' || starts_with(rest, "localhost/");
}

namespace {

std::string dirname_of(const std::string& path) {
  auto p = path.rfind('/');
  return p == std::string::npos ? std::string() : path.substr(0, p);
}

// libvirt's own record of the QEMU pid (qemu:///system), to cross-check.
std::optional<int> pid_file_value(const std::string& uri, const std::string& name) {
  if (uri != "qemu:///system") return std::nullopt;
  auto text = read_file("/run/libvirt/qemu/" + name + ".pid", 64);
  if (!text) return std::nullopt;
  auto v = parse_u64(trim(*text), 10);
  if (!v || *v == 0 || *v > 0x7fffffff) return std::nullopt;
  return static_cast<int>(*v);
}

std::string read_kernel_release(const std::string& image_dir) {
  if (image_dir.empty()) return "";
  auto text = read_file(image_dir + "/manifest.json", 1 << 20);
  if (!text) return "";
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return "";
  auto it = j.find("kernel_release");
  return it != j.end() && it->is_string() ? sanitize_name(it->get<std::string>(), 128) : "";
}

}  // namespace

const char* domain_state_name(DomainState state) {
  switch (state) {
    case DomainState::NoState: return "no state";
    case DomainState::Running: return "running";
    case DomainState::Blocked: return "blocked";
    case DomainState::Paused: return "paused";
    case DomainState::Shutdown: return "shutting down";
    case DomainState::Shutoff: return "shut off";
    case DomainState::Crashed: return "crashed";
    case DomainState::PmSuspended: return "pmsuspended";
    case DomainState::Unknown: break;
  }
  return "unknown";
}

Result<int> thread_group_of(int tid) {
  std::string path = "/proc/" + std::to_string(tid) + "/status";
  KT_ASSIGN_OR_RETURN(std::string text, read_file(path, 1 << 16));
  for (auto line : split(text, '\n')) {
    if (!starts_with(line, "Tgid:")) continue;
    auto v = parse_u64(trim(line.substr(5)), 10);
    if (!v || *v == 0 || *v > 0x7fffffff) break;
    return static_cast<int>(*v);
  }
  return Error(ErrorCode::InvalidInput, path + ": no Tgid line");
}

LibvirtDomain::LibvirtDomain(LibvirtDomain&&) noexcept = default;
LibvirtDomain& LibvirtDomain::operator=(LibvirtDomain&&) noexcept = default;
LibvirtDomain::~LibvirtDomain() = default;

Result<LibvirtDomain> LibvirtDomain::open(const std::string& uri_in, const std::string& name) {
  libvirt_detail::ensure_libvirt_initialized();
  std::string uri = uri_in.empty() ? kDefaultUri : uri_in;
  if (!libvirt_uri_is_local(uri))
    return Error(ErrorCode::Unsupported, "libvirt URI " + uri +
                                             " is not local: kthost reads the QEMU process's memory and sockets, so "
                                             "it must run on the domain's host (use qemu:///system there)");
  if (name.empty()) return Error(ErrorCode::InvalidArgument, "empty domain name");

  auto handle = std::make_shared<Handle>();
  handle->name = name;
  handle->conn = virConnectOpen(uri.c_str());
  if (!handle->conn)
    return Error(ErrorCode::Io, "libvirt: cannot connect to " + uri + ": " + last_error() +
                                    " (is libvirtd running? vm-images/libvirt/kthost-libvirt.sh start-daemon)");
  if (const char* type = virConnectGetType(handle->conn); type && std::string(type) != "QEMU")
    return Error(ErrorCode::Unsupported, "libvirt URI " + uri + " is a " + type + " connection; kthost needs QEMU");
  handle->dom = virDomainLookupByName(handle->conn, name.c_str());
  if (!handle->dom)
    return Error(ErrorCode::NotPresent, "libvirt " + uri + ": no domain '" + name + "': " + last_error() +
                                            " (virsh -c " + uri + " list --all)");

  LibvirtDomain d;
  d.handle_ = handle;
  d.uri_ = uri;
  KT_ASSIGN_OR_RETURN(DomainState st, d.state());
  if (st != DomainState::Running && st != DomainState::Paused && st != DomainState::Blocked)
    return Error(ErrorCode::Unsupported, "domain '" + name + "' is " + domain_state_name(st) +
                                             "; start it first (virsh -c " + uri + " start " + name + ")");

  char* xml_text = virDomainGetXMLDesc(handle->dom, 0);
  if (!xml_text) return Error(ErrorCode::Protocol, "libvirt: domain XML of '" + name + "': " + last_error());
  std::string xml(xml_text);
  std::free(xml_text);
  KT_ASSIGN_OR_RETURN(d.xml_, DomainXml::parse(xml));

  // vCPU threads from QEMU itself; their thread group is the QEMU process.
  auto monitor = d.monitor();
  KT_ASSIGN_OR_RETURN(d.vcpu_threads_, query_vcpu_threads(*monitor));
  if (d.vcpu_threads_.empty()) return Error(ErrorCode::Protocol, "query-cpus-fast: domain '" + name + "' has no vCPUs");
  // A libvirt reached through /proc/<pid>/root (a pod): QEMU counts threads in
  // the pod's pid namespace, and kthost needs the node's numbers.
  const auto anchor = namespace_anchor_from_uri(uri);
  if (anchor) {
    std::vector<int> ns_tids;
    for (const auto& t : d.vcpu_threads_) ns_tids.push_back(t.thread_id);
    auto node_tids = node_tids_in_pid_namespace_of(*anchor, ns_tids);
    if (!node_tids)
      return Error(node_tids.error().code,
                   "domain '" + name + "' behind " + uri + ": its vCPU threads: " + node_tids.error().message);
    for (size_t i = 0; i < ns_tids.size(); ++i) d.vcpu_threads_[i].thread_id = (*node_tids)[i];
  }
  KT_ASSIGN_OR_RETURN(int pid, thread_group_of(d.vcpu_threads_[0].thread_id));
  for (const auto& t : d.vcpu_threads_) {
    auto group = thread_group_of(t.thread_id);
    if (!group || *group != pid)
      return Error(ErrorCode::Protocol, "vCPU " + std::to_string(t.cpu_index) + " thread " +
                                            std::to_string(t.thread_id) + " is not in QEMU process " +
                                            std::to_string(pid));
  }
  if (auto recorded = pid_file_value(uri, name); recorded && *recorded != pid)
    return Error(ErrorCode::Protocol, "/run/libvirt/qemu/" + name + ".pid says " + std::to_string(*recorded) +
                                          " but the vCPU threads belong to " + std::to_string(pid));

  // Paths in the XML are QEMU's view of its filesystem; in another mount
  // namespace kthost reaches them through /proc/<pid>/root.
  KT_ASSIGN_OR_RETURN(std::string root, root_prefix_of(pid));
  if (anchor && !root.empty())
    d.notes_.push_back("domain '" + name + "' runs in other namespaces than kthost (reached through " + uri +
                       "): its thread ids are translated to this host's, and its files are read through " + root);

  VmDescription& vm = d.vm_;
  vm.name = name;
  vm.pid = pid;
  vm.qmp = "";  // libvirt owns QEMU's monitor socket; use monitor()
  vm.channel = under_root(root, d.xml_.channel);
  vm.exec_channel = under_root(root, d.xml_.exec_channel);
  vm.console_log = under_root(root, d.xml_.console_log);
  vm.accel = d.xml_.accel;
  vm.machine = d.xml_.machine;
  vm.vcpus = static_cast<int>(d.vcpu_threads_.size());
  vm.ram_size = d.xml_.memory_bytes;
  vm.image = under_root(root, dirname_of(d.xml_.kernel));
  vm.kernel_release = read_kernel_release(vm.image);
  vm.pt_plugin_out = under_root(root, d.xml_.pt_plugin_out);
  vm.pt_plugin_trigger = under_root(root, d.xml_.pt_plugin_trigger);

  const std::string fallback =
      "kthost falls back to QEMU process memory (HMP gpa2hva + process_vm_readv): it works, but each read is a "
      "system call instead of a memcpy from a mapping.";
  std::string ram_problem = d.xml_.ram_missing;
  if (d.xml_.ram_backend == RamBackend::File) {
    auto path = find_file_backing(pid, vm.ram_size);
    if (path) {
      vm.ram_backend = RamBackend::File;
      vm.ram_path = under_root(root, *path);
    } else {
      ram_problem = "the XML asks for a shared file backing, but " + path.error().message;
    }
  } else if (d.xml_.ram_backend == RamBackend::Memfd) {
    if (find_memfd_backing(pid, vm.ram_size).ok())
      vm.ram_backend = RamBackend::Memfd;  // found again in /proc/<pid>/fd (kthost/vm/ram_backing.h)
    else
      ram_problem = "the XML asks for a shared memfd backing, but QEMU pid " + std::to_string(pid) +
                    " has no memfd of " + std::to_string(vm.ram_size) + " bytes";
  }
  if (vm.ram_backend == RamBackend::None)
    d.warnings_.push_back("domain '" + name + "' has no shared RAM backing: " + ram_problem +
                          ". Add inside <domain> (then restart the domain):\n" + shared_memory_xml_hint() + fallback);
  if (vm.channel.empty())
    d.warnings_.push_back("domain '" + name +
                          "' has no " KTHOST_PORT_SIDEBAND " channel: <devices> lacks <channel type='unix'> with <target "
                          "type='virtio' name='" KTHOST_PORT_SIDEBAND "'/>, so kthost cannot receive the guest's sideband "
                          "(kthost trace and events need it). Add inside <devices> (then restart the domain):\n" +
                          sideband_channel_xml_hint(name));
  return d;
}

std::unique_ptr<LibvirtMonitor> LibvirtDomain::monitor(std::chrono::milliseconds timeout) const {
  return std::unique_ptr<LibvirtMonitor>(new LibvirtMonitor(handle_, timeout));
}

Result<DomainState> LibvirtDomain::state() const {
  int s = 0, reason = 0;
  if (virDomainGetState(handle_->dom, &s, &reason, 0) != 0)
    return Error(ErrorCode::Protocol, "libvirt: state of domain '" + handle_->name + "': " + last_error());
  return to_state(s);
}

Status LibvirtDomain::check_alive() const {
  int s = 0, reason = 0;
  bool got = virDomainGetState(handle_->dom, &s, &reason, 0) == 0;
  if (!got || virConnectIsAlive(handle_->conn) != 1)
    return Error(ErrorCode::Io, "libvirtd went away (" + uri_ + ")" + (got ? std::string() : ": " + last_error()));
  DomainState st = to_state(s);
  switch (st) {
    case DomainState::Running:
    case DomainState::Blocked:
    case DomainState::Paused:
      return ok_status();
    default: {
      std::string why = stop_reason_words(s, reason);
      return Error(ErrorCode::Unsupported,
                   "domain '" + handle_->name + "' is " + domain_state_name(st) + (why.empty() ? "" : ": " + why));
    }
  }
}

Status LibvirtDomain::suspend() {
  if (virDomainSuspend(handle_->dom) != 0)
    return Error(ErrorCode::Protocol, "libvirt: suspend '" + handle_->name + "': " + last_error());
  return ok_status();
}

Status LibvirtDomain::resume() {
  if (virDomainResume(handle_->dom) != 0)
    return Error(ErrorCode::Protocol, "libvirt: resume '" + handle_->name + "': " + last_error());
  return ok_status();
}

Status LibvirtDomain::require_sideband_channel() const {
  if (!vm_.channel.empty()) return ok_status();
  return Error(ErrorCode::Unsupported, "domain '" + handle_->name +
                                           "' has no " KTHOST_PORT_SIDEBAND " channel. Add inside <devices> (virsh edit " +
                                           handle_->name + ", then restart the domain):\n" +
                                           sideband_channel_xml_hint(handle_->name));
}

}  // namespace kt
