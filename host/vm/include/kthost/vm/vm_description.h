// The VM description: what kthost needs to find a running guest. The launcher
// (vm-images/ktvm) writes it as JSON; libvirt lookups build the same struct.
// The file is untrusted input: every field is type- and range-checked.
#pragma once

#include <cstdint>
#include <string>

#include "kthost/common/result.h"

namespace kt {

enum class RamBackend { File, Memfd, None };

struct VmDescription {
  int version = 1;
  std::string name;
  int pid = 0;                 // the QEMU process
  std::string qmp;             // QMP unix socket
  std::string channel;         // virtio-serial org.kthost.0 unix socket ("" if absent)
  std::string exec_channel;    // virtio-serial org.kthost.exec unix socket ("" if absent)
  std::string console_log;
  std::string accel;           // "tcg" or "kvm"
  std::string machine;         // "q35" or "pc"
  int vcpus = 1;
  uint64_t ram_size = 0;
  RamBackend ram_backend = RamBackend::None;
  std::string ram_path;        // file backend: the file; memfd: "" (found via /proc/<pid>/fd)
  std::string image;           // image directory, informational
  std::string kernel_release;  // informational, from the image manifest
  // The software PT plugin (pt-plugin/ktpt.so), when QEMU runs it: its
  // per-vCPU output directory and the trigger file that switches it on.
  std::string pt_plugin_out, pt_plugin_trigger;

  static Result<VmDescription> parse(const std::string& json_text);
  static Result<VmDescription> load(const std::string& path);
  std::string to_json() const;
};

const char* ram_backend_name(RamBackend backend);

}  // namespace kt
