// What the agent reads from others: an HTTP request on its status socket
// (any local client) and a domain's XML with its kthost metadata (whoever
// defines domains), then the opt-in decision on it; a pod's libvirt URI (the
// anchor pid) and a /proc status text's NSpid line (a pod's tasks).
#include <cstddef>
#include <cstdint>
#include <string>

#include "kthost/agent/opt_in.h"
#include "kthost/agent/status_server.h"
#include "kthost/libvirt/domain_xml.h"
#include "kthost/vm/process_namespace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)kt::parse_status_request(text);
  if (auto anchor = kt::namespace_anchor_from_uri(text); anchor && *anchor <= 0) __builtin_trap();
  auto ids = kt::parse_nspid(text);
  if (ids.size() > 32) __builtin_trap();
  for (int id : ids)
    if (id <= 0) __builtin_trap();
  auto xml = kt::DomainXml::parse(text);
  if (xml) {
    auto d = kt::decide_opt_in(*xml, {"ci-*", "farm"});
    if (d.why.empty()) __builtin_trap();
  }
  return 0;
}
