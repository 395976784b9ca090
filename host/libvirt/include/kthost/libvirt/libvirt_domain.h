// A running libvirt/QEMU domain as kthost sees it: the VM description built
// from libvirt alone (domain name + connection URI), the QEMU monitor through
// virDomainQemuMonitorCommand, pause/resume and state through libvirt.
//
// Threading: one LibvirtDomain (and the monitors it hands out) is used from
// one thread at a time. The monitor runs each command on a helper thread so
// that a hung libvirtd costs a Timeout, never a hang.
//
// Signals: the first open() sets SIGPIPE to SIG_IGN when it is SIG_DFL, so
// that libvirtd going away is an error from the next call, not a kill.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/libvirt/domain_xml.h"
#include "kthost/vm/monitor.h"
#include "kthost/vm/vm_description.h"

namespace kt {

namespace libvirt_detail {
struct Handle;  // the connection and domain pointers, shared by the monitor
}

// virDomainState, in words that do not need libvirt's headers.
enum class DomainState { NoState, Running, Blocked, Paused, Shutdown, Shutoff, Crashed, PmSuspended, Unknown };
const char* domain_state_name(DomainState state);

class LibvirtMonitor final : public Monitor {
 public:
  ~LibvirtMonitor() override;
  // QMP through virDomainQemuMonitorCommand. Errors: Protocol (QEMU's error
  // class and description, or libvirt's error), Timeout after `timeout`.
  Result<nlohmann::json> execute(const std::string& command,
                                 const nlohmann::json& arguments = nlohmann::json::object()) override;

 private:
  friend class LibvirtDomain;
  LibvirtMonitor(std::shared_ptr<libvirt_detail::Handle> handle, std::chrono::milliseconds timeout)
      : handle_(std::move(handle)), timeout_(timeout) {}
  std::shared_ptr<libvirt_detail::Handle> handle_;
  std::chrono::milliseconds timeout_;
};

class LibvirtDomain {
 public:
  static constexpr const char* kDefaultUri = "qemu:///system";

  // Connects to `uri` (qemu:///system when empty), looks up `name`, and
  // builds the description: QEMU pid (the thread group of the vCPU threads
  // from query-cpus-fast, checked against libvirt's pid file), vCPU thread
  // ids, RAM backing (domain XML + /proc/<pid>/fd), channel sockets, accel,
  // machine, vCPUs, memory size. Errors: Io/Protocol when libvirtd cannot be
  // reached or refuses (libvirt's message), NotPresent when the domain does
  // not exist, Unsupported when it is not running or the URI is not local.
  // A missing shared RAM backing or channel is not an error: see warnings().
  // A URI whose socket is /proc/<pid>/root/... names a libvirt in another
  // pod's namespaces (kthost/vm/process_namespace.h): thread ids are
  // translated to this host's. In any case, paths from the XML are read
  // through /proc/<qemu pid>/root when QEMU's mount namespace is not ours.
  static Result<LibvirtDomain> open(const std::string& uri, const std::string& name);

  LibvirtDomain(LibvirtDomain&&) noexcept;
  LibvirtDomain& operator=(LibvirtDomain&&) noexcept;
  ~LibvirtDomain();

  const VmDescription& description() const { return vm_; }
  const DomainXml& xml() const { return xml_; }
  const std::vector<VcpuThread>& vcpu_threads() const { return vcpu_threads_; }
  const std::string& uri() const { return uri_; }
  // What the domain lacks, each with the XML lines to add: shared RAM (with
  // the note that kthost falls back to QEMU process memory) and the channels.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // What kthost does differently for this domain and why, for the log: e.g.
  // a domain in a pod's namespaces, reached through /proc/<pid>/root.
  const std::vector<std::string>& notes() const { return notes_; }

  // A new monitor on this domain; every command times out after `timeout`.
  std::unique_ptr<LibvirtMonitor> monitor(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

  // virDomainGetState. Errors: Protocol with libvirt's message (e.g. libvirtd
  // went away).
  Result<DomainState> state() const;
  // Ok while libvirtd answers and the domain is running or paused; else an
  // error that says which: "libvirtd went away: ...", "domain X crashed",
  // "domain X is shut off". For long-running commands to end cleanly.
  Status check_alive() const;
  Status suspend();  // virDomainSuspend
  Status resume();   // virDomainResume

  // Fails with the explanation and the <channel> lines when the domain has no
  // org.kthost.0 channel.
  Status require_sideband_channel() const;

 private:
  LibvirtDomain() = default;
  std::shared_ptr<libvirt_detail::Handle> handle_;
  std::string uri_;
  VmDescription vm_;
  DomainXml xml_;
  std::vector<VcpuThread> vcpu_threads_;
  std::vector<std::string> warnings_;
  std::vector<std::string> notes_;
};

// qemu:///system and qemu:///session are local; qemu+ssh://host/system is
// not, and a remote QEMU's pid, /proc and sockets are not ours to read.
bool libvirt_uri_is_local(const std::string& uri);

// The QEMU process that owns thread `tid` (its Tgid in /proc/<tid>/status).
Result<int> thread_group_of(int tid);

}  // namespace kt
