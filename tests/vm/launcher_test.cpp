// The launcher never hangs: a guest that panics, or one that does not come up
// in time, ends with QEMU gone and a clear message; a stop is clean.
#include <signal.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "test_vm.h"

namespace kt::test {
namespace {

bool process_alive(int pid) { return ::kill(pid, 0) == 0; }

TEST(Launcher, StopIsCleanAndRemovesRamFile) {
  auto vm = TestVm::start(VmOptions{.name = "stopme"});
  ASSERT_TRUE(vm) << vm.error().message;
  int pid = (*vm)->description().pid;
  std::string ram = (*vm)->description().ram_path;
  struct stat st {};
  ASSERT_EQ(::stat(ram.c_str(), &st), 0) << ram;
  ASSERT_TRUE((*vm)->stop());
  EXPECT_FALSE(process_alive(pid));
  EXPECT_NE(::stat(ram.c_str(), &st), 0) << "RAM file left behind: " << ram;
}

TEST(Launcher, GuestPanicEndsQemuWithoutHanging) {
  auto vm = TestVm::start(VmOptions{.name = "panic"});
  ASSERT_TRUE(vm) << vm.error().message;
  int pid = (*vm)->description().pid;
  // The guest panics; panic=-1 and -no-reboot make QEMU exit. The exec call
  // itself gets no answer, which must be an error, not a hang.
  auto r = (*vm)->exec("echo 1 > /proc/sys/kernel/sysrq; echo c > /proc/sysrq-trigger", std::chrono::seconds(20));
  EXPECT_FALSE(r.ok() && r->status == 0);
  for (int i = 0; i < 300 && process_alive(pid); ++i) ::usleep(100000);
  EXPECT_FALSE(process_alive(pid)) << "QEMU still running 30 s after a guest panic";
  EXPECT_NE((*vm)->console_tail(80).find("Kernel panic"), std::string::npos);
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE((*vm)->stop());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

TEST(Launcher, BootTimeoutKillsQemuAndSaysWhy) {
  auto start = std::chrono::steady_clock::now();
  auto vm = TestVm::start(VmOptions{.name = "slow", .boot_timeout_s = 2});
  ASSERT_FALSE(vm) << "a TCG guest cannot be ready in 2 s; the timeout did not fire";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
  EXPECT_NE(vm.error().message.find("no KTHOST-READY within"), std::string::npos) << vm.error().message;
  auto left = run_command("pgrep -f 'qemu-system-x86_64.*[k]thost-slow' || true");
  EXPECT_EQ(std::string(left.output), "") << "QEMU left running: " << left.output;
}

}  // namespace
}  // namespace kt::test
