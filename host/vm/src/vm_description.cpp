#include "kthost/vm/vm_description.h"

#include <nlohmann/json.hpp>

#include "kthost/common/io.h"

namespace kt {

using nlohmann::json;

const char* ram_backend_name(RamBackend backend) {
  switch (backend) {
    case RamBackend::File: return "file";
    case RamBackend::Memfd: return "memfd";
    case RamBackend::None: return "none";
  }
  return "none";
}

namespace {

Result<std::string> get_string(const json& obj, const char* key, bool required, size_t max_len = 4096) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return Error(ErrorCode::InvalidInput, std::string("missing field \"") + key + "\"");
    return std::string();
  }
  if (!it->is_string()) return Error(ErrorCode::InvalidInput, std::string("field \"") + key + "\" is not a string");
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > max_len) return Error(ErrorCode::InvalidInput, std::string("field \"") + key + "\" is too long");
  if (s.find('\0') != std::string::npos)
    return Error(ErrorCode::InvalidInput, std::string("field \"") + key + "\" contains a NUL byte");
  return s;
}

Result<uint64_t> get_uint(const json& obj, const char* key, uint64_t min, uint64_t max) {
  auto it = obj.find(key);
  if (it == obj.end()) return Error(ErrorCode::InvalidInput, std::string("missing field \"") + key + "\"");
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
    return Error(ErrorCode::InvalidInput, std::string("field \"") + key + "\" is not a non-negative integer");
  uint64_t v = it->get<uint64_t>();
  if (v < min || v > max)
    return Error(ErrorCode::InvalidInput, std::string("field \"") + key + "\" = " + std::to_string(v) +
                                              " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

}  // namespace

Result<VmDescription> VmDescription::parse(const std::string& json_text) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error(ErrorCode::InvalidInput, "not valid JSON");
  if (!doc.is_object()) return Error(ErrorCode::InvalidInput, "top level is not an object");
  VmDescription d;
  KT_ASSIGN_OR_RETURN(uint64_t version, get_uint(doc, "version", 1, 1000));
  if (version != 1)
    return Error(ErrorCode::Unsupported, "VM description version " + std::to_string(version) + " (this kthost reads 1)");
  d.version = 1;
  KT_ASSIGN_OR_RETURN(d.name, get_string(doc, "name", false, 256));
  KT_ASSIGN_OR_RETURN(uint64_t pid, get_uint(doc, "pid", 1, 4194304));
  d.pid = static_cast<int>(pid);
  KT_ASSIGN_OR_RETURN(d.qmp, get_string(doc, "qmp", true));
  KT_ASSIGN_OR_RETURN(d.channel, get_string(doc, "channel", false));
  KT_ASSIGN_OR_RETURN(d.exec_channel, get_string(doc, "exec_channel", false));
  KT_ASSIGN_OR_RETURN(d.console_log, get_string(doc, "console_log", false));
  KT_ASSIGN_OR_RETURN(d.accel, get_string(doc, "accel", true, 16));
  if (d.accel != "tcg" && d.accel != "kvm")
    return Error(ErrorCode::InvalidInput, "field \"accel\" must be \"tcg\" or \"kvm\", not \"" + d.accel + "\"");
  KT_ASSIGN_OR_RETURN(d.machine, get_string(doc, "machine", true, 64));
  KT_ASSIGN_OR_RETURN(uint64_t vcpus, get_uint(doc, "vcpus", 1, 4096));
  d.vcpus = static_cast<int>(vcpus);
  auto ram = doc.find("ram");
  if (ram == doc.end() || !ram->is_object()) return Error(ErrorCode::InvalidInput, "missing object \"ram\"");
  KT_ASSIGN_OR_RETURN(d.ram_size, get_uint(*ram, "size", 1u << 20, 1ull << 46));
  KT_ASSIGN_OR_RETURN(std::string backend, get_string(*ram, "backend", true, 16));
  if (backend == "file") d.ram_backend = RamBackend::File;
  else if (backend == "memfd") d.ram_backend = RamBackend::Memfd;
  else if (backend == "none") d.ram_backend = RamBackend::None;
  else return Error(ErrorCode::InvalidInput, "ram.backend must be file, memfd or none, not \"" + backend + "\"");
  KT_ASSIGN_OR_RETURN(d.ram_path, get_string(*ram, "path", d.ram_backend == RamBackend::File));
  KT_ASSIGN_OR_RETURN(d.image, get_string(doc, "image", false));
  KT_ASSIGN_OR_RETURN(d.kernel_release, get_string(doc, "kernel_release", false, 256));
  if (auto pt = doc.find("pt_plugin"); pt != doc.end()) {
    if (!pt->is_object()) return Error(ErrorCode::InvalidInput, "field \"pt_plugin\" must be an object");
    KT_ASSIGN_OR_RETURN(d.pt_plugin_out, get_string(*pt, "out", false));
    KT_ASSIGN_OR_RETURN(d.pt_plugin_trigger, get_string(*pt, "trigger", false));
  }
  return d;
}

Result<VmDescription> VmDescription::load(const std::string& path) {
  KT_ASSIGN_OR_RETURN(std::string text, read_file(path, 1u << 20));
  auto d = parse(text);
  if (!d) return d.error().with_context("VM description " + path);
  return d;
}

std::string VmDescription::to_json() const {
  json doc = {{"version", version},       {"name", name},       {"pid", pid},
              {"qmp", qmp},               {"channel", channel}, {"exec_channel", exec_channel},
              {"console_log", console_log}, {"accel", accel},   {"machine", machine},
              {"vcpus", vcpus},           {"image", image},     {"kernel_release", kernel_release}};
  doc["ram"] = {{"size", ram_size}, {"backend", ram_backend_name(ram_backend)}, {"path", ram_path}};
  if (!pt_plugin_out.empty() || !pt_plugin_trigger.empty())
    doc["pt_plugin"] = {{"out", pt_plugin_out}, {"trigger", pt_plugin_trigger}};
  return doc.dump(2);
}

}  // namespace kt
