#include "kthost/libvirt/domain_xml.h"

#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>

#include <memory>
#include <optional>

#include "kthost/common/strings.h"
#include "kthost_shared.h"

namespace kt {
namespace {

const char* kQemuNamespace = "http://libvirt.org/schemas/domain/qemu/1.0";

struct DocFree {
  void operator()(xmlDoc* d) const { xmlFreeDoc(d); }
};
struct CtxFree {
  void operator()(xmlXPathContext* c) const { xmlXPathFreeContext(c); }
};
struct ObjFree {
  void operator()(xmlXPathObject* o) const { xmlXPathFreeObject(o); }
};

const xmlChar* xc(const char* s) { return reinterpret_cast<const xmlChar*>(s); }

class XPath {
 public:
  explicit XPath(xmlXPathContext* ctx) : ctx_(ctx) {}
  // string(expr): "" when nothing matches.
  std::string text(const std::string& expr) const {
    std::unique_ptr<xmlXPathObject, ObjFree> obj(xmlXPathEvalExpression(xc(("string(" + expr + ")").c_str()), ctx_));
    if (!obj || obj->type != XPATH_STRING || !obj->stringval) return "";
    return std::string(reinterpret_cast<const char*>(obj->stringval));
  }
  size_t count(const std::string& expr) const {
    std::unique_ptr<xmlXPathObject, ObjFree> obj(xmlXPathEvalExpression(xc(("count(" + expr + ")").c_str()), ctx_));
    if (!obj || obj->type != XPATH_NUMBER || !(obj->floatval >= 0) || obj->floatval > 1e6) return 0;
    return static_cast<size_t>(obj->floatval);
  }

 private:
  xmlXPathContext* ctx_;
};

// libvirt's memory units (docs: "memory" element): bytes, decimal KB/MB/...,
// binary k/KiB/M/MiB/...; KiB when absent.
std::optional<uint64_t> unit_multiplier(const std::string& unit) {
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1024},           {"b", 1},          {"bytes", 1},          {"KB", 1000},
      {"k", 1024},          {"KiB", 1024},     {"MB", 1000000},       {"M", 1u << 20},
      {"MiB", 1u << 20},    {"GB", 1000000000}, {"G", 1ull << 30},    {"GiB", 1ull << 30},
      {"TB", 1000000000000}, {"T", 1ull << 40}, {"TiB", 1ull << 40},
  };
  for (const auto& [name, mult] : kUnits)
    if (unit == name) return mult;
  return std::nullopt;
}

std::string channel_path(const XPath& x, const char* port) {
  return x.text(std::string("/domain/devices/channel[@type='unix'][target/@type='virtio'][target/@name='") + port +
                "']/source/@path");
}

}  // namespace

Result<DomainXml> DomainXml::parse(const std::string& xml) {
  if (xml.size() > (16u << 20)) return Error(ErrorCode::InvalidInput, "domain XML larger than 16 MiB");
  std::unique_ptr<xmlDoc, DocFree> doc(xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "domain.xml", nullptr,
                                                     XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  if (!doc) return Error(ErrorCode::InvalidInput, "domain XML is not well-formed XML");
  std::unique_ptr<xmlXPathContext, CtxFree> ctx(xmlXPathNewContext(doc.get()));
  if (!ctx) return Error(ErrorCode::LimitExceeded, "libxml2: cannot create an XPath context");
  xmlXPathRegisterNs(ctx.get(), xc("qemu"), xc(kQemuNamespace));
  XPath x(ctx.get());

  DomainXml d;
  if (x.count("/domain") != 1) return Error(ErrorCode::InvalidInput, "domain XML has no <domain> root element");
  d.name = x.text("/domain/name");
  if (d.name.empty()) return Error(ErrorCode::InvalidInput, "domain XML has no <name>");
  d.type = x.text("/domain/@type");
  d.accel = d.type == "kvm" ? "kvm" : d.type == "qemu" ? "tcg" : d.type;
  d.machine_raw = x.text("/domain/os/type/@machine");
  if (d.machine_raw.find("q35") != std::string::npos)
    d.machine = "q35";
  else if (d.machine_raw == "pc" || starts_with(d.machine_raw, "pc-i440fx") || starts_with(d.machine_raw, "pc-"))
    d.machine = "pc";
  else
    d.machine = d.machine_raw;

  std::string vcpu_text = std::string(trim(x.text("/domain/vcpu/@current")));
  if (vcpu_text.empty()) vcpu_text = std::string(trim(x.text("/domain/vcpu")));
  auto vcpus = parse_u64(vcpu_text, 10);
  if (!vcpus || *vcpus < 1 || *vcpus > 4096)
    return Error(ErrorCode::InvalidInput, "domain XML: <vcpu> is missing or not a count: '" + sanitize_name(vcpu_text, 40) + "'");
  d.vcpus = static_cast<int>(*vcpus);

  std::string mem_text(trim(x.text("/domain/memory")));
  std::string unit = x.text("/domain/memory/@unit");
  auto mem = parse_u64(mem_text, 10);
  auto mult = unit_multiplier(unit);
  if (!mem || !mult || *mem == 0 || *mem > (UINT64_MAX / *mult))
    return Error(ErrorCode::InvalidInput, "domain XML: <memory unit='" + sanitize_name(unit, 16) + "'>" +
                                              sanitize_name(mem_text, 40) + "</memory> is not a size");
  d.memory_bytes = *mem * *mult;

  std::string source = x.text("/domain/memoryBacking/source/@type");
  std::string access = x.text("/domain/memoryBacking/access/@mode");
  size_t cells = x.count("/domain/cpu/numa/cell");
  if (cells > 0 && x.count("/domain/cpu/numa/cell[@memAccess='shared']") == cells) access = "shared";
  if (cells > 1) {
    d.ram_missing = "the domain has " + std::to_string(cells) +
                    " NUMA cells, so its RAM is in several backings; kthost maps one";
  } else if (source != "memfd" && source != "file") {
    d.ram_missing = source.empty() ? "<memoryBacking> has no <source type='memfd'/> (or type='file')"
                                   : "<memoryBacking><source type='" + sanitize_name(source, 32) +
                                         "'/> is not memfd or file";
    if (access != "shared") d.ram_missing += " and no <access mode='shared'/>";
  } else if (access != "shared") {
    d.ram_missing = "<memoryBacking> has no <access mode='shared'/> (a private mapping is a copy kthost cannot read)";
  } else {
    d.ram_backend = source == "memfd" ? RamBackend::Memfd : RamBackend::File;
  }

  d.channel = channel_path(x, KTHOST_PORT_SIDEBAND);
  d.exec_channel = channel_path(x, KTHOST_PORT_EXEC);
  d.console_log = x.text("/domain/devices/serial[@type='file'][1]/source/@path");
  if (d.console_log.empty()) d.console_log = x.text("/domain/devices/serial[1]/log/@file");
  d.kernel = x.text("/domain/os/kernel");
  d.has_qemu_plugin = x.count("/domain/qemu:commandline/qemu:arg[@value='-plugin']") > 0;
  if (d.has_qemu_plugin) {
    std::string spec = x.text("/domain/qemu:commandline/qemu:arg[@value='-plugin']/following-sibling::qemu:arg[1]/@value");
    for (auto kv : split(spec, ',')) {
      auto eq = kv.find('=');
      if (eq == std::string_view::npos) continue;
      auto key = kv.substr(0, eq), value = kv.substr(eq + 1);
      if (value.size() > 4096) continue;
      if (key == "out") d.pt_plugin_out = std::string(value);
      else if (key == "trigger") d.pt_plugin_trigger = std::string(value);
    }
  }
  d.real_time_vcpus = x.count("/domain/cputune/vcpusched") > 0;
  xmlXPathRegisterNs(ctx.get(), xc("kthost"), xc(kAgentMetadataNamespace));
  d.has_agent_metadata = x.count("/domain/metadata/kthost:trace") > 0;
  if (d.has_agent_metadata) {
    d.agent_enabled = sanitize_name(x.text("/domain/metadata/kthost:trace[1]/@enabled"), 256);
    d.agent_tag = sanitize_name(x.text("/domain/metadata/kthost:trace[1]/@tag"), 256);
  }
  return d;
}

std::string shared_memory_xml_hint() {
  return "  <memoryBacking>\n"
         "    <source type='memfd'/>\n"
         "    <access mode='shared'/>\n"
         "  </memoryBacking>\n";
}

std::string sideband_channel_xml_hint(const std::string& domain_name) {
  return "  <channel type='unix'>\n"
         "    <source mode='bind' path='/run/kthost/" + domain_name + "/kthost0.sock'/>\n"
         "    <target type='virtio' name='" KTHOST_PORT_SIDEBAND "'/>\n"
         "  </channel>\n";
}

}  // namespace kt
