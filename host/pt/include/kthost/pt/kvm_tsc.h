// Guest TSC from host TSC, per vCPU, from KVM's debugfs:
//   <debugfs>/kvm/<qemu pid>-<vm fd>/vcpu<N>/tsc-offset                   "%lld"
//   <debugfs>/kvm/<qemu pid>-<vm fd>/vcpu<N>/tsc-scaling-ratio            "%llu" (only with TSC scaling)
//   <debugfs>/kvm/<qemu pid>-<vm fd>/vcpu<N>/tsc-scaling-ratio-frac-bits  "%llu" (only with TSC scaling)
// guest = (host * ratio >> frac_bits) + offset, modulo 2^64, as KVM computes it.
// The offset changes when the guest writes its TSC or the VM is migrated, so
// read it around the trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

struct VcpuTsc {
  unsigned vcpu = 0;
  int64_t offset = 0;
  std::optional<uint64_t> ratio;  // nullopt: no scaling, ratio 1.0
  unsigned frac_bits = 0;         // meaningful with ratio

  // Exact: 128-bit product, then the shift, then the offset with wrap-around.
  uint64_t guest_tsc(uint64_t host_tsc) const;
};

struct KvmVmTsc {
  std::string dir;  // <debugfs>/kvm/<pid>-<fd>
  std::vector<VcpuTsc> vcpus;  // sorted by vCPU index
  const VcpuTsc* vcpu(unsigned index) const;
};

inline constexpr const char* kKvmDebugfsDir = "/sys/kernel/debug/kvm";
inline constexpr size_t kMaxKvmVcpus = 4096;

// "-123\n" -> -123. InvalidInput on anything else, including overflow.
Result<int64_t> parse_kvm_signed(std::string_view text);
// "281474976710656\n" -> value. InvalidInput on anything else.
Result<uint64_t> parse_kvm_unsigned(std::string_view text);

// Reads one vcpu<N> directory. Errors name the file:
//   Io            tsc-offset missing or unreadable
//   InvalidInput  malformed value; ratio 0; frac bits > 63; ratio without frac bits
Result<VcpuTsc> read_vcpu_tsc(const std::string& vcpu_dir, unsigned index);

// Reads every vcpu<N> under one VM directory.
Result<KvmVmTsc> read_kvm_vm_tsc(const std::string& vm_dir);

// Finds the VM of QEMU process `pid` under `kvm_debugfs` and reads it. Errors:
//   Unsupported      kvm_debugfs does not exist (debugfs not mounted, or no KVM)
//   NotPresent       no <pid>-<fd> directory for this pid
//   InvalidArgument  several VMs in that process (use read_kvm_vm_tsc)
Result<KvmVmTsc> read_kvm_tsc(int pid, const std::string& kvm_debugfs = kKvmDebugfsDir);

}  // namespace kt
