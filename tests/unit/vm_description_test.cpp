#include <gtest/gtest.h>

#include "kthost/vm/vm_description.h"

namespace kt {
namespace {

const char* kGood = R"({"version":1,"name":"vm1","pid":4242,"qmp":"/run/q.sock","channel":"/run/k0.sock",
  "exec_channel":"/run/exec.sock","console_log":"/run/console.log","accel":"tcg","machine":"q35","vcpus":2,
  "ram":{"size":536870912,"backend":"file","path":"/dev/shm/kthost-vm1"},"image":"/img","kernel_release":"6.1.0-57-amd64"})";

TEST(VmDescription, ParsesTheLaunchersFormat) {
  auto d = VmDescription::parse(kGood);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->pid, 4242);
  EXPECT_EQ(d->qmp, "/run/q.sock");
  EXPECT_EQ(d->exec_channel, "/run/exec.sock");
  EXPECT_EQ(d->vcpus, 2);
  EXPECT_EQ(d->ram_size, 536870912u);
  EXPECT_EQ(d->ram_backend, RamBackend::File);
  EXPECT_EQ(d->ram_path, "/dev/shm/kthost-vm1");
  // Round trip.
  auto again = VmDescription::parse(d->to_json());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->to_json(), d->to_json());
}

TEST(VmDescription, RejectsBadFieldsWithTheirNames) {
  struct Case {
    std::string json, needle;
  };
  std::vector<Case> cases = {
      {"[]", "not an object"},
      {"{", "not valid JSON"},
      {R"({"version":2})", "version 2"},
      {R"({"version":1,"pid":0,"qmp":"q","accel":"tcg","machine":"q35","vcpus":1,"ram":{"size":1048576,"backend":"none"}})", "pid"},
      {R"({"version":1,"pid":1,"qmp":5,"accel":"tcg","machine":"q35","vcpus":1,"ram":{"size":1048576,"backend":"none"}})", "qmp"},
      {R"({"version":1,"pid":1,"qmp":"q","accel":"hvf","machine":"q35","vcpus":1,"ram":{"size":1048576,"backend":"none"}})", "accel"},
      {R"({"version":1,"pid":1,"qmp":"q","accel":"tcg","machine":"q35","vcpus":1,"ram":{"size":1048576,"backend":"file"}})", "path"},
      {R"({"version":1,"pid":1,"qmp":"q","accel":"tcg","machine":"q35","vcpus":1,"ram":{"size":-5,"backend":"none"}})", "size"},
      {R"({"version":1,"pid":1,"qmp":"q","accel":"tcg","machine":"q35","vcpus":1,"ram":{"size":1048576,"backend":"tape"}})", "ram.backend"},
      {R"({"version":1,"pid":1,"qmp":"q","accel":"tcg","machine":"q35","vcpus":99999,"ram":{"size":1048576,"backend":"none"}})", "vcpus"},
  };
  for (const auto& c : cases) {
    auto d = VmDescription::parse(c.json);
    ASSERT_FALSE(d) << c.json;
    EXPECT_NE(d.error().message.find(c.needle), std::string::npos) << d.error().message;
  }
}

TEST(VmDescription, LoadNamesTheFile) {
  auto d = VmDescription::load("/nonexistent/vm.json");
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("/nonexistent/vm.json"), std::string::npos);
}

}  // namespace
}  // namespace kt
