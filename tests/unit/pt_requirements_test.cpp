#include <gtest/gtest.h>

#include <cstring>

#include "kthost/pt/requirements.h"
#include "pt_test_util.h"

namespace kt {
namespace {

using testing::roots_of;

using testing::kPmuTree;
using testing::make_intel_kvm_host;
using testing::msr_file;

const RequirementCheck& find(const std::vector<RequirementCheck>& checks, const std::string& name) {
  for (const auto& c : checks)
    if (c.name == name) return c;
  ADD_FAILURE() << "no check named " << name;
  static RequirementCheck none;
  return none;
}

TEST(PtRequirements, AllPassOnAFakeIntelKvmHost) {
  testing::TempTree tree;
  make_intel_kvm_host(tree);
  auto checks = check_hardware_pt_requirements(roots_of(tree, false));
  ASSERT_EQ(checks.size(), 7u);
  for (const auto& c : checks) EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
  EXPECT_EQ(find(checks, "Intel CPU with PT").detail, "GenuineIntel, intel_pt flag");
  EXPECT_NE(find(checks, "intel_pt PMU").detail.find("(type 8)"), std::string::npos);
  EXPECT_NE(find(checks, "PT in VMX operation").detail.find("IA32_VMX_MISC[14] set"), std::string::npos);
  EXPECT_EQ(find(checks, "kvm_intel pt_mode=0").detail, "pt_mode=0");
  EXPECT_EQ(find(checks, "perf_event_paranoid").detail, "perf_event_paranoid=1");
}

TEST(PtRequirements, ExplainsAnAmdHostWithoutKvm) {
  testing::TempTree tree;
  tree.write("proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu svm\n");
  tree.write("proc/sys/kernel/perf_event_paranoid", "2\n");
  tree.write("proc/mounts", "sysfs /sys sysfs rw 0 0\n");
  tree.mkdir("sys");
  tree.mkdir("dev");
  auto checks = check_hardware_pt_requirements(roots_of(tree, false));
  for (const auto& c : checks) {
    EXPECT_FALSE(c.ok) << c.name;
    EXPECT_FALSE(c.fix.empty()) << c.name;
  }
  EXPECT_EQ(find(checks, "Intel CPU with PT").detail, "AuthenticAMD, no intel_pt flag");
  EXPECT_EQ(find(checks, "intel_pt PMU").detail, "absent");
  EXPECT_NE(find(checks, "PT in VMX operation").detail.find("unknown"), std::string::npos);
  EXPECT_NE(find(checks, "PT in VMX operation").fix.find("rdmsr 0x485"), std::string::npos);
  EXPECT_EQ(find(checks, "KVM for stock guests").detail, "flavour none: /dev/kvm is absent");
  EXPECT_EQ(find(checks, "kvm_intel pt_mode=0").detail, "kvm_intel not loaded");
  EXPECT_EQ(find(checks, "perf_event_paranoid").detail, "perf_event_paranoid=2");
  EXPECT_EQ(find(checks, "KVM debugfs").detail, "debugfs not mounted");
}

TEST(PtRequirements, ReportsEachWrongSettingPrecisely) {
  testing::TempTree tree;
  make_intel_kvm_host(tree);
  tree.write("dev/cpu/0/msr", msr_file(0x485, 0x7));  // bit 14 clear
  tree.write("sys/module/kvm_intel/parameters/pt_mode", "1\n");
  tree.write("proc/sys/kernel/perf_event_paranoid", "2\n");
  std::filesystem::remove(tree.path("sys/kernel/debug/kvm"));
  tree.write("proc/cpuinfo", "vendor_id\t: GenuineIntel\nflags\t\t: fpu vmx\n");
  auto checks = check_hardware_pt_requirements(roots_of(tree, true));
  EXPECT_FALSE(find(checks, "Intel CPU with PT").ok);
  EXPECT_EQ(find(checks, "Intel CPU with PT").detail, "GenuineIntel, no intel_pt flag");
  EXPECT_FALSE(find(checks, "PT in VMX operation").ok);
  EXPECT_NE(find(checks, "PT in VMX operation").detail.find("clear"), std::string::npos);
  EXPECT_FALSE(find(checks, "kvm_intel pt_mode=0").ok);
  EXPECT_EQ(find(checks, "kvm_intel pt_mode=0").detail, "pt_mode=1");
  EXPECT_TRUE(find(checks, "perf_event_paranoid").ok);  // root
  EXPECT_EQ(find(checks, "perf_event_paranoid").detail, "perf_event_paranoid=2 (root)");
  EXPECT_FALSE(find(checks, "KVM debugfs").ok);
  EXPECT_EQ(find(checks, "KVM debugfs").detail, "debugfs mounted, no kvm directory");
}

TEST(PtRequirements, MalformedPmuAndShortMsrAreReportedNotTrusted) {
  testing::TempTree tree;
  make_intel_kvm_host(tree);
  tree.write("sys/bus/event_source/devices/intel_pt/type", "eight\n");
  tree.write("dev/cpu/0/msr", "short");
  tree.write("proc/sys/kernel/perf_event_paranoid", "-1\n");
  auto checks = check_hardware_pt_requirements(roots_of(tree, false));
  EXPECT_FALSE(find(checks, "intel_pt PMU").ok);
  EXPECT_NE(find(checks, "intel_pt PMU").detail.find("intel_pt/type"), std::string::npos);
  EXPECT_FALSE(find(checks, "PT in VMX operation").ok);
  EXPECT_NE(find(checks, "PT in VMX operation").detail.find("unknown"), std::string::npos);
  EXPECT_TRUE(find(checks, "perf_event_paranoid").ok);
  EXPECT_EQ(find(checks, "perf_event_paranoid").detail, "perf_event_paranoid=-1");
}

}  // namespace
}  // namespace kt
