// What kthost needs from a libvirt domain's XML (virDomainGetXMLDesc), and
// the XML lines to add when something is missing. Pure parsing: no libvirt
// connection, so it is unit-testable. The XML comes from libvirtd and is
// still checked: malformed or missing required elements are InvalidInput.
#pragma once

#include <cstdint>
#include <string>

#include "kthost/common/result.h"
#include "kthost/vm/vm_description.h"

namespace kt {

struct DomainXml {
  std::string name;
  std::string type;          // <domain type=...>: "qemu" (TCG) or "kvm"
  std::string accel;         // "tcg" or "kvm"
  std::string machine;       // "q35", "pc", or <os><type machine=...> as given
  std::string machine_raw;   // <os><type machine=...> as given ("pc-q35-7.2")
  int vcpus = 0;             // <vcpu>, or its current= attribute
  uint64_t memory_bytes = 0; // <memory unit=...>
  // From <memoryBacking>: Memfd or File when <source type='memfd'|'file'/>
  // and <access mode='shared'/> (or a NUMA cell's memAccess='shared').
  RamBackend ram_backend = RamBackend::None;
  std::string ram_missing;   // why ram_backend is None: the element(s) missing
  std::string channel;       // org.kthost.0: <channel type='unix'><source path=...>
  std::string exec_channel;  // org.kthost.exec
  std::string console_log;   // <serial type='file'><source path=...>, or <log file=...>
  std::string kernel;        // <os><kernel>, informational
  bool has_qemu_plugin = false;  // <qemu:commandline> passes -plugin
  // <cputune><vcpusched>: libvirt runs (some of) its vCPU threads under a
  // real-time policy of the domain's own choosing.
  bool real_time_vcpus = false;
  // The software PT plugin's out= and trigger= arguments, from the -plugin
  // argument's value ("file=...ktpt.so,out=DIR,trigger=FILE").
  std::string pt_plugin_out, pt_plugin_trigger;
  // The agent's opt-in, from <metadata><kthost:trace xmlns:kthost=
  // "urn:kthost:agent:1" enabled='yes|no' tag='...'/></metadata>: whether the
  // element is there, its enabled= ("" when absent) and its tag= (for
  // `kthost agent --match`). Untrusted text, kept at most 256 bytes each.
  bool has_agent_metadata = false;
  std::string agent_enabled, agent_tag;

  // Errors: InvalidInput for text that is not XML or lacks <domain>, <name>,
  // <memory> or <vcpu>.
  static Result<DomainXml> parse(const std::string& xml);
};

// The namespace of kthost's element in a domain's <metadata>.
inline constexpr const char* kAgentMetadataNamespace = "urn:kthost:agent:1";

// The <memoryBacking> block to add for a shared memfd backing.
std::string shared_memory_xml_hint();
// The <channel> block to add for the sideband port.
std::string sideband_channel_xml_hint(const std::string& domain_name);

}  // namespace kt
