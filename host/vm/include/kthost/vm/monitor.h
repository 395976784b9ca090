// Monitor: the QEMU monitor as kthost uses it, whether reached over a QMP
// socket (QmpClient) or through libvirt. Every call has a timeout.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "kthost/common/result.h"

namespace kt {

class Monitor {
 public:
  virtual ~Monitor() = default;
  // Runs a QMP command and returns its "return" value. Errors: Protocol with
  // QEMU's error class and description, Timeout, Io.
  virtual Result<nlohmann::json> execute(const std::string& command,
                                         const nlohmann::json& arguments = nlohmann::json::object()) = 0;
  // Runs an HMP command line through human-monitor-command.
  Result<std::string> hmp(const std::string& command_line);
};

// A QMP "error" member as "Class: description". QEMU's reply is checked, not
// trusted: a member that is not an object, or fields that are not strings,
// read as "?" rather than throw.
std::string qmp_error_text(const nlohmann::json& error);

// Registers of one vCPU, from HMP "info registers".
struct CpuRegisters {
  uint64_t rip = 0, cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
  int cpl = 0;
};

// Parses HMP "info registers" output (the first CPU in it). The text comes
// from QEMU; it is still checked: missing fields are an InvalidInput error.
Result<CpuRegisters> parse_info_registers(const std::string& text);

// Reads registers of vCPU `cpu_index` ("info registers" after "cpu N").
Result<CpuRegisters> read_registers(Monitor& monitor, int cpu_index = 0);

struct VcpuThread {
  int cpu_index = 0;
  int thread_id = 0;
};
// query-cpus-fast: the host thread of every vCPU.
Result<std::vector<VcpuThread>> query_vcpu_threads(Monitor& monitor);

}  // namespace kt
