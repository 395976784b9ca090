#include <gtest/gtest.h>

#include "kthost/pt/kvm_tsc.h"
#include "pt_test_util.h"

namespace kt {
namespace {

const std::string kKvm = std::string(KT_TEST_DATA_DIR) + "/kvm_debugfs";

TEST(PtKvmTsc, ReadsTheVmOfAQemuPid) {
  auto vm = read_kvm_tsc(4242, kKvm);
  ASSERT_TRUE(vm) << vm.error().message;
  EXPECT_EQ(vm->dir, kKvm + "/4242-13");
  ASSERT_EQ(vm->vcpus.size(), 2u);
  const VcpuTsc* v1 = vm->vcpu(1);
  ASSERT_NE(v1, nullptr);
  EXPECT_EQ(v1->offset, -112233445566);
  ASSERT_TRUE(v1->ratio);
  EXPECT_EQ(*v1->ratio, 1ull << 48);
  EXPECT_EQ(v1->frac_bits, 48u);
  EXPECT_EQ(vm->vcpu(2), nullptr);
  // Ratio 1.0: only the offset moves the clock.
  EXPECT_EQ(v1->guest_tsc(1'000'000'000'000ull), 1'000'000'000'000ull - 112233445566ull);
}

TEST(PtKvmTsc, ScalesWith128BitMath) {
  auto vm = read_kvm_tsc(7000, kKvm);
  ASSERT_TRUE(vm) << vm.error().message;
  const VcpuTsc& v = vm->vcpus.at(0);
  EXPECT_EQ(*v.ratio, 3ull << 47);  // 1.5
  EXPECT_EQ(v.guest_tsc(2'000'000'000'000ull), 3'000'000'000'000ull - 5'000'000'000ull);
  // host * ratio is 3 * 2^109 here: it needs 128 bits before the shift.
  EXPECT_EQ(v.guest_tsc(1ull << 62), 0x6000000000000000ull - 5'000'000'000ull);
}

TEST(PtKvmTsc, NoScalingFilesMeanRatioOne) {
  auto vm = read_kvm_tsc(9001, kKvm);
  ASSERT_TRUE(vm) << vm.error().message;
  const VcpuTsc& v = vm->vcpus.at(0);
  EXPECT_FALSE(v.ratio);
  EXPECT_EQ(v.guest_tsc(1000), 1000u + 123456u);
  VcpuTsc wrap;
  wrap.offset = -20;
  EXPECT_EQ(wrap.guest_tsc(10), ~0ull - 9);  // modulo 2^64, as the CPU does
}

TEST(PtKvmTsc, MissingVmOrDebugfsIsExplained) {
  auto vm = read_kvm_tsc(1, kKvm);
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().code, ErrorCode::NotPresent);
  EXPECT_NE(vm.error().message.find("process 1"), std::string::npos);
  vm = read_kvm_tsc(4242, "/nonexistent/kvm");
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().code, ErrorCode::Unsupported);
  EXPECT_NE(vm.error().message.find("debugfs"), std::string::npos);
}

TEST(PtKvmTsc, SeveralVmsInOneProcessMustBeChosen) {
  testing::TempTree tree;
  tree.write("kvm/55-10/vcpu0/tsc-offset", "0\n");
  tree.write("kvm/55-12/vcpu0/tsc-offset", "0\n");
  tree.write("kvm/550-3/vcpu0/tsc-offset", "0\n");  // another pid sharing a prefix
  auto vm = read_kvm_tsc(55, tree.path("kvm"));
  ASSERT_FALSE(vm);
  EXPECT_EQ(vm.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(vm.error().message.find("55-10, 55-12"), std::string::npos) << vm.error().message;
  auto one = read_kvm_vm_tsc(tree.path("kvm/55-12"));
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(read_kvm_tsc(550, tree.path("kvm"))->vcpus.size(), 1u);
}

TEST(PtKvmTsc, MalformedValuesNameTheFile) {
  struct Case {
    std::string offset, ratio, frac, file;
  };
  for (const Case& c : std::vector<Case>{
           {"abc\n", "", "", "tsc-offset"},
           {"99999999999999999999\n", "", "", "tsc-offset"},
           {"\n", "", "", "tsc-offset"},
           {"0", "0\n", "48\n", "tsc-scaling-ratio"},
           {"0", "-1\n", "48\n", "tsc-scaling-ratio"},
           {"0", "281474976710656\n", "64\n", "tsc-scaling-ratio-frac-bits"},
           {"0", "281474976710656\n", "x", "tsc-scaling-ratio-frac-bits"},
           {"0", "281474976710656\n", "-", "tsc-scaling-ratio-frac-bits"},
       }) {
    testing::TempTree tree;
    tree.write("kvm/1-2/vcpu0/tsc-offset", c.offset);
    if (!c.ratio.empty()) tree.write("kvm/1-2/vcpu0/tsc-scaling-ratio", c.ratio);
    if (c.frac != "-") {
      if (!c.frac.empty()) tree.write("kvm/1-2/vcpu0/tsc-scaling-ratio-frac-bits", c.frac);
    }
    auto vm = read_kvm_tsc(1, tree.path("kvm"));
    ASSERT_FALSE(vm) << c.offset << " " << c.ratio << " " << c.frac;
    EXPECT_EQ(vm.error().code, ErrorCode::InvalidInput);
    EXPECT_NE(vm.error().message.find("vcpu0/" + c.file), std::string::npos) << vm.error().message;
  }
}

TEST(PtKvmTsc, ParsesKernelNumberFormatsStrictly) {
  EXPECT_EQ(*parse_kvm_signed("-9223372036854775808\n"), INT64_MIN);
  EXPECT_EQ(*parse_kvm_signed("42"), 42);
  EXPECT_FALSE(parse_kvm_signed("9223372036854775808"));
  EXPECT_FALSE(parse_kvm_signed("+1"));
  EXPECT_FALSE(parse_kvm_signed("1 2"));
  EXPECT_EQ(*parse_kvm_unsigned("18446744073709551615\n"), ~0ull);
  EXPECT_FALSE(parse_kvm_unsigned("18446744073709551616"));
  EXPECT_FALSE(parse_kvm_unsigned("0x10"));
}

}  // namespace
}  // namespace kt
