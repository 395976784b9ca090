// PtCapture with the software plugin. start() returns only once the plugin
// confirms it traces (<out>/started), never on an earlier trace's marker.
// stop(): a trace's stream is read only once every vCPU has confirmed its
// end (cpuN.stopped); a vCPU that sleeps through the switch-off is woken by
// a VM stop/cont; one that never confirms is named, never silently cut
// short. The plugin is played by a FAKE poller thread and QEMU by a FAKE
// monitor; both write the plugin's files the way ktpt.so does.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kthost/capture/pt_capture.h"
#include "kthost_shared.h"
#include "pt_test_util.h"

namespace kt {
namespace {

std::string cpu_file(const testing::TempTree&, int cpu, const char* suffix) {
  return std::string("pt/") + KTHOST_PT_FILE_PREFIX + std::to_string(cpu) + suffix;
}

void append(const testing::TempTree& tree, const std::string& rel, const std::string& bytes) {
  std::ofstream out(tree.path(rel), std::ios::binary | std::ios::app);
  out << bytes;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// FAKE QEMU monitor: answers query-status, stop and cont, logs each command,
// and runs on_stop when the VM is stopped (where the real plugin's idle
// callback ends the streams of halted vCPUs).
class FakeQemuMonitor final : public Monitor {
 public:
  Result<nlohmann::json> execute(const std::string& command, const nlohmann::json&) override {
    commands.push_back(command);
    if (command == "query-status") return nlohmann::json{{"status", status}};
    if (command == "stop") {
      status = "paused";
      if (on_stop) on_stop();
      return nlohmann::json::object();
    }
    if (command == "cont") {
      if (cont_failures > 0) {
        --cont_failures;
        return Error(ErrorCode::Timeout, "FAKE: cont timed out");
      }
      status = "running";
      return nlohmann::json::object();
    }
    return Error(ErrorCode::Protocol, "FAKE: no " + command);
  }
  std::vector<std::string> commands;
  std::string status = "running";
  int cont_failures = 0;
  std::function<void()> on_stop;
};

// FAKE plugin poller: like ktpt.so's, it sees the trigger some polls late and
// then writes <out>/started.
class FakePluginPoller {
 public:
  FakePluginPoller(std::string trigger, std::string started) {
    thread_ = std::thread([this, trigger, started] {
      while (!done_) {
        if (exists(trigger) && !exists(started)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a late poll
          ++confirmations;  // before the file: start() may return as soon as it exists
          std::ofstream(started) << "off_generation=0\n";
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~FakePluginPoller() {
    done_ = true;
    thread_.join();
  }
  std::atomic<int> confirmations{0};

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

struct Captured {
  std::string bytes[2];
};

PtCapture::Sink sink_into(Captured& c) {
  return [&c](uint32_t cpu, const uint8_t* data, size_t len) {
    c.bytes[cpu].append(reinterpret_cast<const char*>(data), len);
    return ok_status();
  };
}

class PtCaptureStop : public ::testing::Test {
 protected:
  void SetUp() override {
    tree.mkdir("pt");
    // An earlier trace's bytes and markers, as the plugin leaves them.
    for (int cpu = 0; cpu < 2; ++cpu) {
      tree.write(cpu_file(tree, cpu, KTHOST_PT_FILE_PACKETS), "old" + std::to_string(cpu));
      tree.write(cpu_file(tree, cpu, KTHOST_PT_FILE_STOPPED), "generation=1\n");
    }
    auto c = PtCapture::software(tree.path("pt"), tree.path("pt-on"), 2, &monitor);
    ASSERT_TRUE(c) << c.error().message;
    capture = std::move(*c);
    poller = std::make_unique<FakePluginPoller>(tree.path("pt-on"), tree.path("pt/" KTHOST_PT_FILE_STARTED));
  }
  void TearDown() override { poller.reset(); }
  // The plugin's part once the trigger is gone: vCPU `cpu` writes its last
  // packets, then its marker.
  void end_stream(int cpu, const std::string& last) {
    append(tree, cpu_file(tree, cpu, KTHOST_PT_FILE_PACKETS), last);
    tree.write(cpu_file(tree, cpu, KTHOST_PT_FILE_STOPPED), "generation=2\n");
  }
  testing::TempTree tree;
  FakeQemuMonitor monitor;
  std::unique_ptr<PtCapture> capture;
  std::unique_ptr<FakePluginPoller> poller;
};

TEST_F(PtCaptureStop, StartReturnsOnlyOnceThePluginConfirms) {
  ASSERT_TRUE(capture->start());
  EXPECT_TRUE(exists(tree.path("pt/" KTHOST_PT_FILE_STARTED)));
  EXPECT_EQ(poller->confirmations.load(), 1);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST_F(PtCaptureStop, TheTriggerHoldsOurPidInOurOwnPidNamespace) {
  EXPECT_TRUE(same_pid_namespace(::getpid()));
  EXPECT_FALSE(same_pid_namespace(0));
  ASSERT_TRUE(capture->start());
  EXPECT_EQ(slurp(tree.path("pt-on")), std::to_string(::getpid()) + "\n");
}

// A QEMU in another pid namespace (a pod) cannot see our pid: the trigger
// says heartbeat, and every poll a second or more after the last touches it.
TEST_F(PtCaptureStop, FromAnotherPidNamespaceTheTriggerIsAHeartbeatThatPollKeepsFresh) {
  auto c = PtCapture::software(tree.path("pt"), tree.path("pt-on"), 2, &monitor, TriggerLiveness::Heartbeat);
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE((*c)->start());
  EXPECT_EQ(slurp(tree.path("pt-on")), KTHOST_PT_TRIGGER_HEARTBEAT "\n");
  const timespec old_times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, tree.path("pt-on").c_str(), old_times, 0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  Captured got;
  ASSERT_TRUE((*c)->poll(sink_into(got)));
  struct stat st {};
  ASSERT_EQ(::stat(tree.path("pt-on").c_str(), &st), 0);
  EXPECT_GT(st.st_mtim.tv_sec, 1000) << "poll did not touch the trigger";
  // The plugin gave up on a stale heartbeat and removed the trigger: the
  // next touch says so, rather than the trace going on without PT.
  ASSERT_EQ(::unlink(tree.path("pt-on").c_str()), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto st2 = (*c)->poll(sink_into(got));
  ASSERT_FALSE(st2);
  EXPECT_NE(st2.error().message.find("switched PT off"), std::string::npos) << st2.error().message;
  end_stream(0, "A-end");
  end_stream(1, "B-end");
  (void)(*c)->stop(sink_into(got));
}

TEST_F(PtCaptureStop, AnEarlierTracesStartedMarkerIsNotTakenAsConfirmation) {
  poller.reset();  // no plugin sees the trigger
  tree.write("pt/" KTHOST_PT_FILE_STARTED, "off_generation=0\n");
  capture->set_start_timeout(std::chrono::milliseconds(200));
  auto st = capture->start();
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, ErrorCode::Timeout);
  EXPECT_NE(st.error().message.find("did not confirm it switched on"), std::string::npos) << st.error().message;
  EXPECT_FALSE(exists(tree.path("pt-on"))) << "the trigger must not be left on";
}

TEST_F(PtCaptureStop, StartRemovesAnEarlierTracesMarkers) {
  ASSERT_TRUE(capture->start());
  EXPECT_TRUE(exists(tree.path("pt-on")));
  EXPECT_FALSE(exists(tree.path(cpu_file(tree, 0, KTHOST_PT_FILE_STOPPED))));
  EXPECT_FALSE(exists(tree.path(cpu_file(tree, 1, KTHOST_PT_FILE_STOPPED))));
}

TEST_F(PtCaptureStop, BusyVcpusConfirmAndTheVmIsNotTouched) {
  ASSERT_TRUE(capture->start());
  append(tree, cpu_file(tree, 0, KTHOST_PT_FILE_PACKETS), "aaaa");
  // Both vCPUs run blocks: they end their streams within the first wait.
  end_stream(0, "A-end");
  end_stream(1, "B-end");
  Captured got;
  ASSERT_TRUE(capture->stop(sink_into(got)));
  EXPECT_EQ(got.bytes[0], "aaaaA-end");
  EXPECT_EQ(got.bytes[1], "B-end");
  EXPECT_TRUE(capture->unconfirmed_cpus().empty());
  EXPECT_TRUE(monitor.commands.empty());
  EXPECT_FALSE(exists(tree.path("pt-on")));
}

TEST_F(PtCaptureStop, AHaltedVcpuIsWokenByStopContAndItsLastPacketsAreRead) {
  ASSERT_TRUE(capture->start());
  end_stream(0, "A-end");
  // vCPU 1 sleeps in HLT: its held packets come only when the VM stops.
  monitor.on_stop = [this] { end_stream(1, "held-frame-packets"); };
  Captured got;
  ASSERT_TRUE(capture->stop(sink_into(got)));
  EXPECT_EQ(got.bytes[1], "held-frame-packets");
  EXPECT_TRUE(capture->unconfirmed_cpus().empty());
  EXPECT_EQ(monitor.commands, (std::vector<std::string>{"query-status", "stop", "cont"}));
  EXPECT_EQ(monitor.status, "running");
}

TEST_F(PtCaptureStop, AVcpuThatNeverConfirmsIsNamedAndTheVmStillRuns) {
  ASSERT_TRUE(capture->start());
  end_stream(0, "A-end");
  monitor.cont_failures = 2;  // cont is retried until QEMU takes it
  Captured got;
  ASSERT_TRUE(capture->stop(sink_into(got)));
  EXPECT_EQ(capture->unconfirmed_cpus(), (std::vector<uint32_t>{1}));
  EXPECT_EQ(monitor.status, "running");
  EXPECT_EQ(monitor.commands.back(), "cont");
}

TEST_F(PtCaptureStop, AVmPausedByItsOwnerIsLeftPaused) {
  ASSERT_TRUE(capture->start());
  end_stream(0, "A-end");
  monitor.status = "paused";
  Captured got;
  ASSERT_TRUE(capture->stop(sink_into(got)));
  EXPECT_EQ(monitor.commands, (std::vector<std::string>{"query-status"}));
  EXPECT_EQ(monitor.status, "paused");
  EXPECT_EQ(capture->unconfirmed_cpus(), (std::vector<uint32_t>{1}));
}

TEST_F(PtCaptureStop, ContThatNeverWorksIsAnErrorThatSaysHowToResume) {
  ASSERT_TRUE(capture->start());
  monitor.cont_failures = 100;
  Captured got;
  auto st = capture->stop(sink_into(got));
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("could not be continued"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("virsh resume"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace kt
