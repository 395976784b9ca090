// A temporary directory tree for tests that need files (fake sysfs, procfs,
// debugfs), removed at the end of the test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "kthost/common/system_roots.h"

namespace kt::testing {

class TempTree {
 public:
  TempTree() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kthost-pt-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    root_ = pattern;
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::string& root() const { return root_; }
  std::string path(const std::string& rel) const { return root_ + "/" + rel; }

  // Writes a file, creating its directories.
  void write(const std::string& rel, const std::string& content) const {
    std::filesystem::path p = path(rel);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << content;
  }
  void mkdir(const std::string& rel) const { std::filesystem::create_directories(path(rel)); }
  void copy(const std::string& from, const std::string& rel) const {
    std::filesystem::create_directories(std::filesystem::path(path(rel)).parent_path());
    std::filesystem::copy(from, path(rel), std::filesystem::copy_options::recursive);
  }

 private:
  std::string root_;
};

// SystemRoots pointing at a fake host tree's proc, sys and dev.
inline SystemRoots roots_of(const TempTree& tree, bool is_root = false) {
  SystemRoots r;
  r.proc = tree.path("proc");
  r.sys = tree.path("sys");
  r.dev = tree.path("dev");
  r.is_root = is_root;
  return r;
}

inline const std::string kPmuTree = std::string(KT_TEST_DATA_DIR) + "/intel_pt_sysfs";

// An MSR device file as the msr driver serves it: pread at the MSR number.
inline std::string msr_file(uint32_t msr, uint64_t value) {
  std::string bytes(msr + 8, '\0');
  std::memcpy(bytes.data() + msr, &value, sizeof value);
  return bytes;
}

// A FAKE Intel KVM host with everything in place.
inline void make_intel_kvm_host(const TempTree& tree) {
  tree.write("proc/cpuinfo",
             "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Core(TM) i7-6700\n"
             "flags\t\t: fpu vme de pse tsc msr vmx intel_pt xsaves\n\n"
             "processor\t: 1\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vmx intel_pt\n");
  tree.write("proc/sys/kernel/perf_event_paranoid", "1\n");
  tree.write("proc/mounts", "sysfs /sys sysfs rw 0 0\ndebugfs /sys/kernel/debug debugfs rw,relatime 0 0\n");
  tree.copy(kPmuTree, "sys/bus/event_source/devices/intel_pt");
  tree.write("sys/module/kvm_intel/parameters/pt_mode", "0\n");
  tree.mkdir("sys/kernel/debug/kvm");
  tree.write("dev/cpu/0/msr", msr_file(0x485, (1ull << 14) | 0x7));
  tree.write("dev/kvm", "");
}

}  // namespace kt::testing
