// A libvirt connection for a whole host: which domains run, their XML, and
// their lifecycle events (started, stopped, crashed, migrated, rebooted),
// for a process that follows every domain (`kthost agent`).
//
// Events arrive on libvirt's default event loop, which this class runs on a
// thread of its own for the life of the process (libvirt cannot unregister
// it). The callback runs on that thread: keep it short (queue, then return).
// A connection that closes (libvirtd restarted or killed, keepalive timeout)
// says so through alive(); the owner reconnects with a new LibvirtHost.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/libvirt/libvirt_domain.h"

namespace kt {

enum class LifecycleKind { Started, Stopped, Crashed, MigratedAway, Rebooted, Other };
const char* lifecycle_kind_name(LifecycleKind kind);

struct LifecycleEvent {
  std::string domain;  // the domain's name (untrusted text, sanitized)
  LifecycleKind kind = LifecycleKind::Other;
  std::string detail;  // libvirt's detail in words ("destroyed", "booted", ...)
};

// libvirt's lifecycle event and detail codes (virDomainEventType and its
// detail enums) in words; `domain` is left empty. Unknown codes are Other.
LifecycleEvent lifecycle_from_codes(int event, int detail);

struct RunningDomain {
  std::string name;
  int id = -1;  // libvirt's domain id: new on every start
};

class LibvirtHost {
 public:
  using EventHandler = std::function<void(const LifecycleEvent&)>;

  // Connects to `uri` (qemu:///system when empty; local URIs only), with
  // keepalive so that a dead libvirtd is noticed within seconds, and
  // registers for lifecycle and reboot events. Errors: Io with libvirt's
  // message when libvirtd cannot be reached; Unsupported for a remote URI.
  static Result<std::unique_ptr<LibvirtHost>> connect(const std::string& uri, EventHandler on_event);
  ~LibvirtHost();
  LibvirtHost(const LibvirtHost&) = delete;
  LibvirtHost& operator=(const LibvirtHost&) = delete;

  // Active domains (running, paused, ...). Errors: Protocol with libvirt's message.
  Result<std::vector<RunningDomain>> running_domains();
  // virDomainGetXMLDesc of a domain. Errors: NotPresent, Protocol.
  Result<std::string> domain_xml(const std::string& name);
  // False once libvirt closed the connection (libvirtd went away).
  bool alive() const;
  const std::string& uri() const { return uri_; }

  struct Impl;

 private:
  LibvirtHost() = default;
  std::unique_ptr<Impl> impl_;
  std::string uri_;
};

}  // namespace kt
