// The accelerator rule on reconstructed /proc, /sys and /dev trees of the
// host kinds kthost meets: no KVM, kvm_pvm (opens, cannot boot a stock
// kernel), Intel and AMD KVM, and the half-configured cases between.
#include "kthost/vm/accelerator.h"

#include <gtest/gtest.h>

#include "pt_test_util.h"

namespace kt {
namespace {

using testing::roots_of;

// Only the first processor's flags count: cpu_flags adds a second one that
// shows vmx and svm, which must change no answer below.
void cpu_flags(const testing::TempTree& tree, const std::string& flags) {
  tree.write("proc/cpuinfo", "processor\t: 0\nvendor_id\t: X\nflags\t\t: fpu " + flags +
                                 " tsc\n\nprocessor\t: 1\nflags\t\t: fpu vmx svm\n");
}

TEST(Accelerator, NoDevKvmIsTcg) {
  testing::TempTree tree;
  cpu_flags(tree, "svm");
  tree.mkdir("sys/module/kvm_amd");
  tree.mkdir("dev");
  auto c = choose_accelerator(roots_of(tree));
  EXPECT_EQ(c.accel, Accelerator::Tcg);
  EXPECT_EQ(c.reason, "/dev/kvm is absent");
  EXPECT_FALSE(c.kvm_present_but_unusable);
}

// The Intel host seen in this project's fleet: /dev/kvm opens, the CPU shows
// neither flag, /sys/module/kvm_pvm exists.
TEST(Accelerator, KvmPvmOpensButIsTcgWithTheReason) {
  testing::TempTree tree;
  cpu_flags(tree, "sse2");
  tree.mkdir("sys/module/kvm");
  tree.mkdir("sys/module/kvm_pvm");
  tree.write("dev/kvm", "");
  auto c = choose_accelerator(roots_of(tree));
  EXPECT_TRUE(c.kvm.dev_openable);
  EXPECT_EQ(c.kvm.flavour(), "kvm_pvm");
  EXPECT_EQ(c.accel, Accelerator::Tcg);
  EXPECT_TRUE(c.kvm_present_but_unusable);
  EXPECT_NE(c.reason.find("kvm_pvm"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("neither VMX nor SVM"), std::string::npos) << c.reason;
  EXPECT_NE(explain_silent_kvm_guest(c).find("cannot run a stock kernel"), std::string::npos);
}

TEST(Accelerator, OpenDevKvmWithoutVirtualisationFlagsIsTcg) {
  testing::TempTree tree;
  cpu_flags(tree, "sse2");
  tree.write("dev/kvm", "");
  auto c = choose_accelerator(roots_of(tree));
  EXPECT_EQ(c.accel, Accelerator::Tcg);
  EXPECT_TRUE(c.kvm_present_but_unusable);
  EXPECT_NE(c.reason.find("flavour: none"), std::string::npos) << c.reason;
}

TEST(Accelerator, IntelAndAmdKvmAreKvm) {
  for (auto [flag, module] : {std::pair{"vmx", "kvm_intel"}, {"svm", "kvm_amd"}}) {
    testing::TempTree tree;
    cpu_flags(tree, flag);
    tree.mkdir(std::string("sys/module/") + module);
    tree.write("dev/kvm", "");
    auto c = choose_accelerator(roots_of(tree));
    EXPECT_EQ(c.accel, Accelerator::Kvm) << flag << ": " << c.reason;
    EXPECT_EQ(c.kvm.flavour(), module);
    EXPECT_STREQ(accelerator_name(c.accel), "kvm");
  }
}

TEST(Accelerator, FlagWithoutItsModuleIsTcg) {
  testing::TempTree tree;
  cpu_flags(tree, "vmx");
  tree.mkdir("sys/module/kvm_amd");  // the wrong vendor's module
  tree.write("dev/kvm", "");
  auto c = choose_accelerator(roots_of(tree));
  EXPECT_EQ(c.accel, Accelerator::Tcg);
  EXPECT_NE(c.reason.find("VMX but kvm_intel is not loaded"), std::string::npos) << c.reason;
}

// A /dev/kvm that exists but does not open read-write (a directory fails
// for root too, where a mode-000 file would not).
TEST(Accelerator, UnopenableDevKvmIsTcg) {
  testing::TempTree tree;
  cpu_flags(tree, "vmx");
  tree.mkdir("sys/module/kvm_intel");
  tree.mkdir("dev/kvm");
  auto c = choose_accelerator(roots_of(tree));
  EXPECT_EQ(c.accel, Accelerator::Tcg);
  EXPECT_NE(c.reason.find("cannot be opened"), std::string::npos) << c.reason;
}

TEST(Accelerator, UnreadableCpuinfoIsTcg) {
  testing::TempTree tree;
  tree.mkdir("sys/module/kvm_intel");
  tree.write("dev/kvm", "");
  auto c = choose_accelerator(roots_of(tree));
  EXPECT_EQ(c.accel, Accelerator::Tcg);
  EXPECT_NE(c.reason.find("cpuinfo is unreadable"), std::string::npos) << c.reason;
}

}  // namespace
}  // namespace kt
