// Private: the libvirt connection and domain pointers, owned together and
// shared by LibvirtDomain and its monitors (a monitor command still running
// on its helper thread after a timeout keeps them alive until it returns).
#pragma once

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <string>

#include "kthost/libvirt/libvirt_domain.h"

namespace kt::libvirt_detail {

struct Handle {
  virConnectPtr conn = nullptr;
  virDomainPtr dom = nullptr;
  std::string name;

  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (dom) virDomainFree(dom);
    if (conn) virConnectClose(conn);
  }
};

// Initializes libvirt once per process and silences its default error
// printer: kthost reports errors itself.
void ensure_libvirt_initialized();
// libvirt's last error on this thread, or `fallback` when there is none.
std::string last_error(const char* fallback = "unknown libvirt error");

}  // namespace kt::libvirt_detail
