// PtCapture::open: which PT source a trace gets, on FAKE host trees (no PT
// hardware exists here). Hardware is never chosen against doctor's checks or
// for a guest outside KVM; the plugin is taken where the guest runs it; and
// when neither works the error names why for both.
#include <gtest/gtest.h>

#include "kthost/capture/pt_capture.h"
#include "pt_test_util.h"

namespace kt {
namespace {

using testing::roots_of;

// A FAKE AMD host: no PT at all.
void make_amd_host(const testing::TempTree& tree) {
  tree.write("proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu svm\n\n");
  tree.write("proc/sys/kernel/perf_event_paranoid", "2\n");
  tree.write("proc/mounts", "sysfs /sys sysfs rw 0 0\n");
  tree.mkdir("sys/bus/event_source/devices");
  tree.mkdir("dev");
}

VmDescription guest(const std::string& accel, bool plugin, const std::string& dir) {
  VmDescription vm;
  vm.accel = accel;
  vm.vcpus = 2;
  if (plugin) {
    vm.pt_plugin_out = dir;
    vm.pt_plugin_trigger = dir + "/pt-on";
  }
  return vm;
}

TEST(PtCaptureOpen, NoneIsNoCapture) {
  testing::TempTree tree;
  make_amd_host(tree);
  auto c = PtCapture::open(PtChoice::None, guest("tcg", true, tree.path("pt")), nullptr, "vm", tree.path("w"), {},
                           roots_of(tree));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->get(), nullptr);
}

TEST(PtCaptureOpen, AutoTakesThePluginWhereThereIsNoHardware) {
  testing::TempTree tree;
  make_amd_host(tree);
  auto c = PtCapture::open(PtChoice::Auto, guest("tcg", true, tree.path("pt")), nullptr, "vm", tree.path("w"), {},
                           roots_of(tree));
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_NE(c->get(), nullptr);
  EXPECT_EQ((*c)->kind(), "software");
  EXPECT_EQ((*c)->cpus(), (std::vector<uint32_t>{0, 1}));
}

TEST(PtCaptureOpen, HardwareAgainstDoctorsChecksNamesTheFirstFailure) {
  testing::TempTree tree;
  make_amd_host(tree);
  auto c = PtCapture::open(PtChoice::Hardware, guest("kvm", true, tree.path("pt")), nullptr, "vm", tree.path("w"),
                           {}, roots_of(tree));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::Unsupported);
  EXPECT_NE(c.error().message.find("no hardware PT: Intel CPU with PT"), std::string::npos) << c.error().message;
}

TEST(PtCaptureOpen, NeitherSourceSaysWhyForBoth) {
  testing::TempTree tree;
  make_amd_host(tree);
  auto c = PtCapture::open(PtChoice::Auto, guest("tcg", false, ""), nullptr, "domain vm1", tree.path("w"), {},
                           roots_of(tree));
  ASSERT_FALSE(c);
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("no PT source for domain vm1: hardware: Intel CPU with PT"), std::string::npos) << m;
  EXPECT_NE(m.find("; software: "), std::string::npos) << m;
  EXPECT_NE(m.find("--pt none"), std::string::npos) << m;
}

TEST(PtCaptureOpen, AGuestOutsideKvmGetsThePluginEvenWhereTheHostHasPt) {
  testing::TempTree tree;
  testing::make_intel_kvm_host(tree);
  auto c = PtCapture::open(PtChoice::Auto, guest("tcg", true, tree.path("pt")), nullptr, "vm", tree.path("w"), {},
                           roots_of(tree));
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_NE(c->get(), nullptr);
  EXPECT_EQ((*c)->kind(), "software");
  auto hw = PtCapture::open(PtChoice::Hardware, guest("tcg", true, tree.path("pt")), nullptr, "vm", tree.path("w"),
                            {}, roots_of(tree));
  ASSERT_FALSE(hw);
  EXPECT_NE(hw.error().message.find("the guest runs under tcg, not KVM"), std::string::npos) << hw.error().message;
  auto no_qmp = PtCapture::open(PtChoice::Hardware, guest("kvm", true, tree.path("pt")), nullptr, "vm",
                                tree.path("w"), {}, roots_of(tree));
  ASSERT_FALSE(no_qmp);
  EXPECT_NE(no_qmp.error().message.find("no QMP monitor"), std::string::npos) << no_qmp.error().message;
}

TEST(PtCaptureOpen, SoftwareChoiceGivesThePluginsOwnError) {
  testing::TempTree tree;
  make_amd_host(tree);
  auto c = PtCapture::open(PtChoice::Software, guest("tcg", false, ""), nullptr, "vm", tree.path("w"), {},
                           roots_of(tree));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("software PT plugin"), std::string::npos) << c.error().message;
}

}  // namespace
}  // namespace kt
