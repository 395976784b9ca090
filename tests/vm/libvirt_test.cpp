// The libvirt layer against a real libvirtd and a real domain booted from the
// test image under TCG: vm-images/libvirt/kthost-libvirt.sh starts libvirtd
// (by hand, no systemd), defines and starts the domain; kthost then finds
// everything from the domain's name. One guest at a time: the domain is
// redefined for the tests that need it without shared RAM or the channel.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/libvirt/libvirt_domain.h"
#include "test_vm.h"

namespace kt::test {
namespace {

const char* kDomain = "kthost-lvtest";
const char* kUri = "qemu:///system";

std::string script() { return std::string(KT_SOURCE_DIR) + "/vm-images/libvirt/kthost-libvirt.sh"; }
std::string virsh(const std::string& args) { return "virsh -q -c " + std::string(kUri) + " " + args; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string trim_copy(const std::string& s) { return std::string(trim(s)); }

// `kthost trace --domain` into DIR in the background, returned once it is
// tracing (its start line names DIR); null, with the log, if it never is.
std::unique_ptr<Background> start_traced(const std::string& dir, const std::string& log) {
  auto started = Background::start({kthost_binary(), "trace", "--domain", kDomain, "-o", dir, "--pt", "none"}, log);
  if (!started) {
    ADD_FAILURE() << started.error().message;
    return nullptr;
  }
  std::unique_ptr<Background> bg = std::move(*started);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!contains(bg->log(), "writing " + dir) && std::chrono::steady_clock::now() < deadline)
    ::usleep(100000);
  if (!contains(bg->log(), "writing " + dir)) {
    ADD_FAILURE() << "kthost trace did not start tracing:\n" << bg->log();
    return nullptr;
  }
  return bg;
}

// A trace that ended on its own (guest gone, libvirtd gone) left a bundle
// that reads back: `kthost report` accepts it, events.jsonl holds exactly the
// events summary.json counts, the end reason says why, and the initial kcore
// is there in full.
// `ends`: what the end reason may say (any one); `min_events`: what the guest
// had surely sent by then.
void expect_bundle_reads_back(const std::string& dir, const std::vector<std::string>& ends, size_t min_events) {
  auto report = run_command(kthost_binary() + " report " + dir + " --json --quiet", 120);
  ASSERT_EQ(report.status, 0) << report.output;
  auto doc = nlohmann::json::parse(report.output, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << report.output.substr(0, 500);
  EXPECT_TRUE(doc.contains("losses") && doc.contains("insns")) << report.output.substr(0, 500);
  auto summary = read_file(dir + "/summary.json");
  ASSERT_TRUE(summary);
  auto s = nlohmann::json::parse(*summary);
  bool end_ok = false;
  for (const auto& e : ends) end_ok = end_ok || contains(s.value("end", ""), e);
  EXPECT_TRUE(end_ok) << *summary;
  auto events = read_file(dir + "/events.jsonl", 64u << 20);
  ASSERT_TRUE(events);
  size_t lines = 0;
  for (char c : *events) lines += c == '\n';
  EXPECT_EQ(lines, s.value("events", 0u)) << "events.jsonl and summary.json disagree";
  EXPECT_GE(lines, min_events);
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/kcore").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1 << 20);
}

class LibvirtTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_.clear();
    failure_reason_.clear();
    current_config_.clear();
    if (::geteuid() != 0) {
      skip_reason_ = "needs root: libvirtd (qemu:///system) runs QEMU as root here";
      return;
    }
    if (run_command("command -v virsh && test -x /usr/sbin/libvirtd", 10).status != 0) {
      skip_reason_ = "libvirt is not installed (scripts/install-deps.sh installs libvirt-daemon-driver-qemu, libvirt-clients)";
      return;
    }
    // Installed but not starting is a fault of ours or of the host: a
    // failure, never a skip.
    auto r = run_command(script() + " start-daemon", 120);
    if (r.status != 0) {
      failure_reason_ = "libvirtd could not be started by " + script() + " start-daemon:\n" + r.output;
      return;
    }
    // A domain left behind by an interrupted run.
    run_command(script() + " undefine " + kDomain, 60);
  }

  static void TearDownTestSuite() {
    if (skip_reason_.empty() && failure_reason_.empty()) run_command(script() + " undefine " + kDomain, 60);
  }

  void SetUp() override {
    if (!failure_reason_.empty()) FAIL() << failure_reason_;
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  void TearDown() override {
    if (HasFailure()) {
      std::string log = "/run/kthost/" + std::string(kDomain) + "/console.log";
      std::cerr << "--- console tail (" << log << ") ---\n" << run_command("tail -30 " + log, 10).output;
      std::cerr << "--- libvirt qemu log tail ---\n"
                << run_command("tail -15 /var/log/libvirt/qemu/" + std::string(kDomain) + ".log", 10).output;
    }
  }

  // Makes the test domain run with `config` ("" = full: memfd RAM, both
  // channels; or extra define options), restarting it only when it changes.
  static void ensure_domain(const std::string& config) {
    if (current_config_ == config && run_command(virsh("domstate ") + kDomain, 20).output.find("running") == 0)
      return;
    current_config_.clear();
    run_command(script() + " stop " + kDomain, 60);
    auto d = run_command(script() + " define " + image_dir() + " --name " + kDomain + " --accel tcg " + config, 60);
    ASSERT_EQ(d.status, 0) << d.output;
    auto s = run_command(script() + " start " + kDomain + " --timeout 240", 300);
    ASSERT_EQ(s.status, 0) << s.output;
    current_config_ = config;
  }

  static std::string skip_reason_;
  static std::string failure_reason_;  // libvirt is installed but did not start
  static std::string current_config_;
};

std::string LibvirtTest::skip_reason_;
std::string LibvirtTest::failure_reason_;
std::string LibvirtTest::current_config_;

TEST_F(LibvirtTest, DescriptionFromLibvirtMatchesQemu) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  const VmDescription& vm = d->description();
  auto pid_text = read_file("/run/libvirt/qemu/" + std::string(kDomain) + ".pid");
  ASSERT_TRUE(pid_text);
  EXPECT_EQ(std::to_string(vm.pid), trim_copy(*pid_text));
  EXPECT_EQ(vm.name, kDomain);
  EXPECT_EQ(vm.accel, "tcg");
  EXPECT_EQ(vm.machine, "q35");
  EXPECT_EQ(vm.vcpus, 2);
  EXPECT_EQ(vm.ram_size, 512ull << 20);
  EXPECT_EQ(vm.ram_backend, RamBackend::Memfd);
  EXPECT_TRUE(d->warnings().empty()) << d->warnings().front();
  for (const auto& sock : {vm.channel, vm.exec_channel}) {
    struct stat st {};
    ASSERT_FALSE(sock.empty());
    EXPECT_EQ(::stat(sock.c_str(), &st), 0) << sock;
    EXPECT_TRUE(S_ISSOCK(st.st_mode)) << sock;
  }
  EXPECT_EQ(vm.channel, "/run/kthost/" + std::string(kDomain) + "/kthost0.sock");
  EXPECT_EQ(vm.exec_channel, "/run/kthost/" + std::string(kDomain) + "/exec.sock");
  EXPECT_EQ(vm.image, image_dir());
  EXPECT_FALSE(vm.kernel_release.empty());
  // Every vCPU thread is a thread of the QEMU process.
  ASSERT_EQ(d->vcpu_threads().size(), 2u);
  std::set<int> indexes;
  for (const auto& t : d->vcpu_threads()) {
    indexes.insert(t.cpu_index);
    struct stat st {};
    EXPECT_EQ(::stat(("/proc/" + std::to_string(vm.pid) + "/task/" + std::to_string(t.thread_id)).c_str(), &st), 0)
        << "vCPU " << t.cpu_index << " thread " << t.thread_id << " not in /proc/" << vm.pid << "/task";
  }
  EXPECT_EQ(indexes, (std::set<int>{0, 1}));
  auto st = d->state();
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(*st, DomainState::Running);
  EXPECT_TRUE(d->check_alive().ok());
}

TEST_F(LibvirtTest, MonitorAnswersQmpAndHmp) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  auto mon = d->monitor(std::chrono::seconds(10));
  auto status = mon->execute("query-status");
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_EQ(status->value("status", std::string()), "running");
  auto hmp = mon->hmp("info status");
  ASSERT_TRUE(hmp) << hmp.error().message;
  EXPECT_TRUE(contains(*hmp, "running")) << *hmp;
  auto regs = read_registers(*mon, 1);
  ASSERT_TRUE(regs) << regs.error().message;
  EXPECT_NE(regs->cr3, 0u);
  auto bad = mon->execute("no-such-command");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::Protocol);
  EXPECT_TRUE(contains(bad.error().message, "CommandNotFound")) << bad.error().message;
}

TEST_F(LibvirtTest, SuspendAndResumeThroughLibvirt) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_TRUE(d->suspend().ok());
  EXPECT_EQ(*d->state(), DomainState::Paused);
  EXPECT_EQ(trim_copy(run_command(virsh("domstate ") + kDomain, 20).output), "paused");
  EXPECT_EQ(d->monitor()->execute("query-status")->value("status", std::string()), "paused");
  ASSERT_TRUE(d->resume().ok());
  EXPECT_EQ(*d->state(), DomainState::Running);
  EXPECT_EQ(trim_copy(run_command(virsh("domstate ") + kDomain, 20).output), "running");
}

TEST_F(LibvirtTest, SnapshotByDomainName) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  std::string dir = "/tmp/kthost-lvtest-snap";
  run_command("rm -rf " + dir);
  auto r = run_command(kthost_binary() + " snapshot --domain " + kDomain + " -o " + dir, 300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "memory backend    mmap")) << r.output;
  EXPECT_TRUE(contains(r.output, "(from guest exec channel)")) << r.output;
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/kcore").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1 << 20);
  auto exec = run_command(kthost_binary() + " exec --domain " + kDomain + " -- echo hello-from-guest", 60);
  EXPECT_EQ(exec.status, 0) << exec.output;
  EXPECT_TRUE(contains(exec.output, "hello-from-guest")) << exec.output;
  run_command("rm -rf " + dir);
}

TEST_F(LibvirtTest, TraceByDomainName) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  std::string dir = "/tmp/kthost-lvtest-trace";
  run_command("rm -rf " + dir);
  auto r = run_command(kthost_binary() + " trace --domain " + kDomain + " -o " + dir + " --duration 10 --pt none", 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "domain " + std::string(kDomain) + ", memory mmap")) << r.output;
  auto summary = read_file(dir + "/summary.json");
  ASSERT_TRUE(summary) << summary.error().message;
  auto j = nlohmann::json::parse(*summary);
  EXPECT_EQ(j["end"], "duration");
  EXPECT_GT(j["events"].get<int>(), 0) << *summary;  // at least the guest's HELLO and state dump
  EXPECT_EQ(j["decode_errors"].get<int>(), 0);
  EXPECT_EQ(trim_copy(run_command(virsh("domstate ") + kDomain, 20).output), "running");
  run_command("rm -rf " + dir);
}

TEST_F(LibvirtTest, KilledTraceLeavesDomainRunning) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  std::string dir = "/tmp/kthost-lvtest-kill";
  run_command("rm -rf " + dir);
  auto bg = start_traced(dir, "/tmp/kthost-lvtest-kill.log");
  ASSERT_NE(bg, nullptr);
  // Tracing now; then kill -9 mid-trace.
  ::sleep(2);
  bg->signal(SIGKILL);
  EXPECT_EQ(bg->wait(std::chrono::seconds(10)), 128 + SIGKILL);
  EXPECT_EQ(trim_copy(run_command(virsh("domstate ") + kDomain, 20).output), "running");
  // The guest still runs: its clock advances and it answers commands.
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->monitor()->execute("query-status")->value("status", std::string()), "running");
  auto exec = run_command(kthost_binary() + " exec --domain " + kDomain + " -- cat /proc/uptime", 60);
  EXPECT_EQ(exec.status, 0) << exec.output;
  run_command("rm -rf " + dir);
}

TEST_F(LibvirtTest, NoticesLibvirtdGoingAway) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_TRUE(d->check_alive().ok());
  auto pid = read_file("/run/libvirtd.pid");
  if (!pid) GTEST_SKIP() << "libvirtd was not started by kthost-libvirt.sh (no /run/libvirtd.pid): not restarting it";
  // A trace is running when libvirtd goes: it must end cleanly on its own,
  // with its bundle closed, and leave the guest running.
  std::string dir = "/tmp/kthost-lvtest-restart";
  run_command("rm -rf " + dir);
  auto bg = start_traced(dir, "/tmp/kthost-lvtest-restart.log");
  ASSERT_NE(bg, nullptr);
  ::sleep(2);
  ASSERT_EQ(run_command("kill " + trim_copy(*pid) + " && while kill -0 " + trim_copy(*pid) +
                            " 2>/dev/null; do sleep 0.1; done",
                        30)
                .status,
            0);
  auto alive = d->check_alive();
  ASSERT_FALSE(alive.ok());
  EXPECT_TRUE(contains(alive.error().message, "libvirtd went away")) << alive.error().message;
  int status = bg->wait(std::chrono::seconds(30));
  EXPECT_EQ(status, 1) << "kthost trace did not end cleanly when libvirtd went away:\n" << bg->log();
  auto summary = read_file(dir + "/summary.json");
  ASSERT_TRUE(summary) << bg->log();
  EXPECT_TRUE(contains(*summary, "libvirtd")) << *summary;
  auto manifest = read_file(dir + "/manifest.json");
  ASSERT_TRUE(manifest);
  EXPECT_TRUE(contains(*manifest, "\"complete\": true")) << *manifest;
  expect_bundle_reads_back(dir, {"libvirtd"}, 1);
  // QEMU outlives libvirtd; a new libvirtd takes the domain back.
  auto r = run_command(script() + " start-daemon", 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(trim_copy(run_command(virsh("domstate ") + kDomain, 20).output), "running");
  auto again = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->description().pid, d->description().pid);
  EXPECT_TRUE(again->check_alive().ok());
}

TEST_F(LibvirtTest, NoticesStoppedDomainAndTraceEndsCleanly) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  std::string dir = "/tmp/kthost-lvtest-stop";
  run_command("rm -rf " + dir);
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  auto bg = start_traced(dir, "/tmp/kthost-lvtest-stop.log");
  ASSERT_NE(bg, nullptr);
  ::sleep(1);
  // The guest goes away under kthost (as a crash would end it).
  ASSERT_EQ(run_command(virsh("destroy ") + kDomain, 60).status, 0);
  LibvirtTest::current_config_.clear();
  int status = bg->wait(std::chrono::seconds(20));
  EXPECT_NE(status, -1) << "kthost trace did not end after the domain stopped:\n" << bg->log();
  EXPECT_LT(status, 128) << "kthost trace died of a signal:\n" << bg->log();
  EXPECT_TRUE(read_file(dir + "/summary.json").ok()) << bg->log();
  // The guest went away: the liveness check or the channel's close says so.
  expect_bundle_reads_back(dir, {"guest:", "QEMU closed the channel"}, 0);
  auto alive = d->check_alive();
  ASSERT_FALSE(alive.ok());
  EXPECT_TRUE(contains(alive.error().message, "shut off")) << alive.error().message;
  run_command("rm -rf " + dir);
}

TEST_F(LibvirtTest, GuestPanicEndsTheTraceWithABundleThatReadsBack) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain(""));
  std::string dir = "/tmp/kthost-lvtest-panic";
  run_command("rm -rf " + dir);
  auto bg = start_traced(dir, "/tmp/kthost-lvtest-panic.log");
  ASSERT_NE(bg, nullptr);
  ::sleep(2);
  // A real kernel panic: panic=-1 and no reboot end the domain.
  run_command("timeout 30 " + kthost_binary() + " exec --domain " + kDomain +
                  " --timeout 5 -- 'echo 1 > /proc/sys/kernel/sysrq; echo c > /proc/sysrq-trigger'",
              40);
  LibvirtTest::current_config_.clear();
  int status = bg->wait(std::chrono::seconds(60));
  EXPECT_NE(status, -1) << "kthost trace did not end after the guest panicked:\n" << bg->log();
  EXPECT_LT(status, 128) << "kthost trace died of a signal:\n" << bg->log();
  expect_bundle_reads_back(dir, {"guest:", "QEMU closed the channel"}, 1);
  EXPECT_NE(trim_copy(run_command(virsh("domstate ") + kDomain, 20).output), "running");
  run_command("rm -rf " + dir);
}

TEST_F(LibvirtTest, NoSharedMemoryFallsBackToProcessMemory) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain("--ram none"));
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->description().ram_backend, RamBackend::None);
  ASSERT_EQ(d->warnings().size(), 1u);
  const std::string& w = d->warnings()[0];
  EXPECT_TRUE(contains(w, "no shared RAM backing")) << w;
  EXPECT_TRUE(contains(w, "<memoryBacking>")) << w;
  EXPECT_TRUE(contains(w, "<source type='memfd'/>")) << w;
  EXPECT_TRUE(contains(w, "<access mode='shared'/>")) << w;
  EXPECT_TRUE(contains(w, "falls back to QEMU process memory")) << w;
  std::string dir = "/tmp/kthost-lvtest-noram";
  run_command("rm -rf " + dir);
  auto r = run_command(kthost_binary() + " snapshot --domain " + kDomain + " -o " + dir, 300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "memory backend    process")) << r.output;
  EXPECT_TRUE(contains(r.output, "<access mode='shared'/>")) << r.output;
  EXPECT_TRUE(contains(r.output, "falls back to QEMU process memory")) << r.output;
  auto t = run_command(kthost_binary() + " trace --domain " + kDomain + " -o " + dir + "-trace --duration 3 --pt none", 120);
  EXPECT_EQ(t.status, 0) << t.output;
  EXPECT_TRUE(contains(t.output, "memory process")) << t.output;
  run_command("rm -rf " + dir + " " + dir + "-trace");
}

TEST_F(LibvirtTest, NoChannelGetsTheXmlToAdd) {
  ASSERT_NO_FATAL_FAILURE(ensure_domain("--no-channel"));
  auto d = LibvirtDomain::open(kUri, kDomain);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_TRUE(d->description().channel.empty());
  auto req = d->require_sideband_channel();
  ASSERT_FALSE(req.ok());
  EXPECT_TRUE(contains(req.error().message, "<channel type='unix'>")) << req.error().message;
  EXPECT_TRUE(contains(req.error().message, "<target type='virtio' name='org.kthost.0'/>")) << req.error().message;
  std::string dir = "/tmp/kthost-lvtest-nochan";
  auto r = run_command(kthost_binary() + " trace --domain " + kDomain + " -o " + dir + " --duration 3 --pt none", 120);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "has no org.kthost.0 channel")) << r.output;
  EXPECT_TRUE(contains(r.output, "<channel type='unix'>")) << r.output;
  EXPECT_TRUE(contains(r.output, "<source mode='bind' path=")) << r.output;
  EXPECT_TRUE(contains(r.output, "<target type='virtio' name='org.kthost.0'/>")) << r.output;
  run_command("rm -rf " + dir);
}

TEST_F(LibvirtTest, UnknownDomainAndStoppedDomainAreClearErrors) {
  auto missing = LibvirtDomain::open(kUri, "kthost-no-such-domain");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::NotPresent);
  EXPECT_TRUE(contains(missing.error().message, "no domain 'kthost-no-such-domain'")) << missing.error().message;
  auto r = run_command(kthost_binary() + " trace --domain kthost-no-such-domain -o /tmp/kthost-lvtest-none", 60);
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "no domain 'kthost-no-such-domain'")) << r.output;
  auto remote = LibvirtDomain::open("qemu+ssh://elsewhere/system", kDomain);
  ASSERT_FALSE(remote);
  EXPECT_EQ(remote.error().code, ErrorCode::Unsupported);
}

}  // namespace
}  // namespace kt::test
