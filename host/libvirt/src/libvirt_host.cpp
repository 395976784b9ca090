#include "kthost/libvirt/libvirt_host.h"

#include <mutex>
#include <thread>

#include "handle.h"
#include "kthost/common/strings.h"

namespace kt {

using libvirt_detail::last_error;

struct LibvirtHost::Impl {
  virConnectPtr conn = nullptr;
  EventHandler on_event;
  std::atomic<bool> alive{true};
  int lifecycle_callback = -1, reboot_callback = -1;
  bool close_registered = false;

  ~Impl() {
    if (!conn) return;
    if (lifecycle_callback >= 0) virConnectDomainEventDeregisterAny(conn, lifecycle_callback);
    if (reboot_callback >= 0) virConnectDomainEventDeregisterAny(conn, reboot_callback);
    if (close_registered) virConnectUnregisterCloseCallback(conn, on_close);
    virConnectClose(conn);
  }

  static void on_close(virConnectPtr, int, void* opaque) { static_cast<Impl*>(opaque)->alive = false; }
};

namespace {

// libvirt's default event loop, started once and run for the process's life.
void ensure_event_loop() {
  static std::once_flag once;
  std::call_once(once, [] {
    libvirt_detail::ensure_libvirt_initialized();
    virEventRegisterDefaultImpl();
    std::thread([] {
      for (;;) virEventRunDefaultImpl();
    }).detach();
  });
}

std::string name_of(virDomainPtr dom) {
  const char* name = virDomainGetName(dom);
  return name ? sanitize_name(name, 256) : std::string("?");
}

int on_lifecycle(virConnectPtr, virDomainPtr dom, int event, int detail, void* opaque) {
  auto* impl = static_cast<LibvirtHost::Impl*>(opaque);
  if (!impl->on_event) return 0;
  LifecycleEvent e = lifecycle_from_codes(event, detail);
  e.domain = name_of(dom);
  impl->on_event(e);
  return 0;
}

void on_reboot(virConnectPtr, virDomainPtr dom, void* opaque) {
  auto* impl = static_cast<LibvirtHost::Impl*>(opaque);
  if (impl->on_event) impl->on_event({name_of(dom), LifecycleKind::Rebooted, "reset"});
}

}  // namespace

LifecycleEvent lifecycle_from_codes(int event, int detail) {
  LifecycleEvent e;
  switch (event) {
    case VIR_DOMAIN_EVENT_STARTED:
      e.kind = LifecycleKind::Started;
      e.detail = detail == VIR_DOMAIN_EVENT_STARTED_MIGRATED ? "migrated in"
                 : detail == VIR_DOMAIN_EVENT_STARTED_RESTORED ? "restored"
                                                                : "booted";
      break;
    case VIR_DOMAIN_EVENT_STOPPED:
      e.kind = detail == VIR_DOMAIN_EVENT_STOPPED_MIGRATED ? LifecycleKind::MigratedAway
               : detail == VIR_DOMAIN_EVENT_STOPPED_CRASHED ? LifecycleKind::Crashed
                                                            : LifecycleKind::Stopped;
      e.detail = detail == VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN    ? "shut down"
                 : detail == VIR_DOMAIN_EVENT_STOPPED_DESTROYED ? "destroyed"
                 : detail == VIR_DOMAIN_EVENT_STOPPED_CRASHED   ? "crashed"
                 : detail == VIR_DOMAIN_EVENT_STOPPED_MIGRATED  ? "migrated away"
                 : detail == VIR_DOMAIN_EVENT_STOPPED_SAVED     ? "saved"
                 : detail == VIR_DOMAIN_EVENT_STOPPED_FAILED    ? "failed"
                                                                : "stopped";
      break;
    case VIR_DOMAIN_EVENT_CRASHED:
      e.kind = LifecycleKind::Crashed;
      e.detail = "guest panicked";
      break;
    default:
      e.kind = LifecycleKind::Other;
      e.detail = "event " + std::to_string(event) + "/" + std::to_string(detail);
  }
  return e;
}

const char* lifecycle_kind_name(LifecycleKind kind) {
  switch (kind) {
    case LifecycleKind::Started: return "started";
    case LifecycleKind::Stopped: return "stopped";
    case LifecycleKind::Crashed: return "crashed";
    case LifecycleKind::MigratedAway: return "migrated away";
    case LifecycleKind::Rebooted: return "rebooted";
    case LifecycleKind::Other: break;
  }
  return "other";
}

Result<std::unique_ptr<LibvirtHost>> LibvirtHost::connect(const std::string& uri_in, EventHandler on_event) {
  std::string uri = uri_in.empty() ? LibvirtDomain::kDefaultUri : uri_in;
  if (!libvirt_uri_is_local(uri))
    return Error(ErrorCode::Unsupported, "libvirt URI " + uri + " is not local: kthost agent must run on the domains' host");
  ensure_event_loop();
  std::unique_ptr<LibvirtHost> host(new LibvirtHost());
  host->uri_ = uri;
  host->impl_ = std::make_unique<Impl>();
  Impl& impl = *host->impl_;
  impl.on_event = std::move(on_event);
  impl.conn = virConnectOpen(uri.c_str());
  if (!impl.conn)
    return Error(ErrorCode::Io, "libvirt: cannot connect to " + uri + ": " + last_error() +
                                    " (is libvirtd running? vm-images/libvirt/kthost-libvirt.sh start-daemon)");
  // Keepalive: a libvirtd that dies or hangs closes the connection within
  // about 5 x 3 s, and alive() turns false.
  if (virConnectSetKeepAlive(impl.conn, 5, 3) < 0)
    return Error(ErrorCode::Protocol, "libvirt: keepalive on " + uri + ": " + last_error());
  if (virConnectRegisterCloseCallback(impl.conn, Impl::on_close, &impl, nullptr) < 0)
    return Error(ErrorCode::Protocol, "libvirt: close callback on " + uri + ": " + last_error());
  impl.close_registered = true;
  impl.lifecycle_callback = virConnectDomainEventRegisterAny(
      impl.conn, nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE, VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), &impl, nullptr);
  impl.reboot_callback = virConnectDomainEventRegisterAny(impl.conn, nullptr, VIR_DOMAIN_EVENT_ID_REBOOT,
                                                          VIR_DOMAIN_EVENT_CALLBACK(on_reboot), &impl, nullptr);
  if (impl.lifecycle_callback < 0 || impl.reboot_callback < 0)
    return Error(ErrorCode::Protocol, "libvirt: cannot register for domain events on " + uri + ": " + last_error());
  return host;
}

LibvirtHost::~LibvirtHost() = default;

bool LibvirtHost::alive() const { return impl_ && impl_->alive && virConnectIsAlive(impl_->conn) == 1; }

Result<std::vector<RunningDomain>> LibvirtHost::running_domains() {
  virDomainPtr* list = nullptr;
  int n = virConnectListAllDomains(impl_->conn, &list, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
  if (n < 0) return Error(ErrorCode::Protocol, "libvirt: listing domains on " + uri_ + ": " + last_error());
  std::vector<RunningDomain> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({name_of(list[i]), static_cast<int>(virDomainGetID(list[i]))});
    virDomainFree(list[i]);
  }
  free(list);
  return out;
}

Result<std::string> LibvirtHost::domain_xml(const std::string& name) {
  virDomainPtr dom = virDomainLookupByName(impl_->conn, name.c_str());
  if (!dom) return Error(ErrorCode::NotPresent, "libvirt: no domain " + sanitize_name(name) + ": " + last_error());
  char* xml = virDomainGetXMLDesc(dom, 0);
  virDomainFree(dom);
  if (!xml) return Error(ErrorCode::Protocol, "libvirt: XML of domain " + sanitize_name(name) + ": " + last_error());
  std::string text(xml);
  free(xml);
  return text;
}

}  // namespace kt
