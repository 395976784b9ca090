// Checks shared by the VM suites: host reads of guest kernel text compared
// with what the guest itself reports.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kthost/common/sha256.h"
#include "kthost/common/strings.h"
#include "kthost/introspect/backends.h"
#include "kthost/introspect/kernel_layout.h"
#include "test_vm.h"

namespace kt::test {

inline GuestSymbols guest_symbols(TestVm& vm) {
  GuestSymbols s;
  auto ks = vm.check("cat /proc/kallsyms", std::chrono::seconds(120));
  EXPECT_TRUE(ks) << ks.error().message;
  auto ms = vm.check("cat /proc/modules");
  EXPECT_TRUE(ms) << ms.error().message;
  if (ks) {
    EXPECT_TRUE(s.parse_kallsyms(*ks));
  }
  if (ms) {
    EXPECT_TRUE(s.parse_modules(*ms));
  }
  return s;
}

inline uint64_t symbol(const GuestSymbols& s, const std::string& name) {
  const KernelSymbol* sym = s.find(name);
  EXPECT_NE(sym, nullptr) << name << " missing from the guest's kallsyms";
  return sym ? sym->address : 0;
}

// sha256 of [addr, addr+len) as the guest reads it through its /proc/kcore.
inline std::string guest_kcore_sha256(TestVm& vm, uint64_t addr, uint64_t len) {
  auto out = vm.check("ktprobe kcore-read " + hex(addr) + " " + std::to_string(len) + " --raw | sha256sum",
                      std::chrono::seconds(180));
  EXPECT_TRUE(out) << out.error().message;
  return out ? std::string(trim(*out).substr(0, 64)) : "";
}

inline std::string guest_kcore_hex(TestVm& vm, uint64_t addr, uint64_t len) {
  auto out = vm.check("ktprobe kcore-read " + hex(addr) + " " + std::to_string(len));
  EXPECT_TRUE(out) << out.error().message;
  if (!out) return "";
  auto doc = nlohmann::json::parse(std::string(trim(*out)), nullptr, false);
  EXPECT_TRUE(doc.is_object() && doc.contains("hex")) << *out;
  return doc.is_object() && doc.contains("hex") ? doc["hex"].get<std::string>() : "";
}

inline Result<std::vector<uint8_t>> host_read(const GuestMemory& mem, const KernelLayout& layout, uint64_t addr,
                                              uint64_t len) {
  PageWalker walker(mem, layout.paging);
  std::vector<uint8_t> bytes(len);
  KT_TRY(walker.read_virtual(addr, bytes.data(), bytes.size()));
  return bytes;
}

inline Result<KernelLayout> layout_for(TestVm& vm, const GuestMemory& mem, const GuestSymbols& symbols) {
  KT_ASSIGN_OR_RETURN(CpuRegisters regs, read_registers(vm.qmp(), 0));
  return discover_kernel_layout(mem, regs, symbols);
}

}  // namespace kt::test
