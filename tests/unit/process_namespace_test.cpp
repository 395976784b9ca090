// A QEMU in a pod's namespaces (kthost/vm/process_namespace.h): the anchor
// in a libvirt URI, NSpid parsing, and, against a real pid and mount
// namespace made by unshare(1) (inside a new user namespace when not root,
// so that no root is needed), the translation of a thread id and the
// /proc/<pid>/root prefix.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/vm/process_namespace.h"

namespace kt {
namespace {

TEST(ProcessNamespace, AnchorIsTheProcOfASocketUnderProcRoot) {
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=/proc/4242/root/run/libvirt/virtqemud-sock"), 4242);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?mode=legacy&socket=%2Fproc%2F77%2Froot%2Fs"), 77);
  EXPECT_EQ(namespace_anchor_from_uri("qemu:///system"), std::nullopt);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=/run/libvirt/libvirt-sock"), std::nullopt);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=/proc/self/root/x"), std::nullopt);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=/proc/12/cwd/x"), std::nullopt);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=/proc/0/root/x"), std::nullopt);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=/proc/99999999999/root/x"), std::nullopt);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=/proc/12"), std::nullopt);
  EXPECT_EQ(namespace_anchor_from_uri("qemu+unix:///system?socket=%"), std::nullopt);
}

TEST(ProcessNamespace, NspidListsEachLevelAndRejectsGarbage) {
  EXPECT_EQ(parse_nspid("Name:\tqemu\nNSpid:\t4711\t23\t1\nPPid:\t1\n"), (std::vector<int>{4711, 23, 1}));
  EXPECT_EQ(parse_nspid("NSpid:\t9\n"), (std::vector<int>{9}));
  EXPECT_TRUE(parse_nspid("Name:\tx\n").empty());
  EXPECT_TRUE(parse_nspid("NSpid:\t9\tx\n").empty());
  EXPECT_TRUE(parse_nspid("NSpid:\t9\t0\n").empty());
  std::string deep = "NSpid:";
  for (int i = 0; i < 33; ++i) deep += "\t" + std::to_string(i + 1);
  EXPECT_TRUE(parse_nspid(deep).empty()) << "more levels than the kernel allows";
}

TEST(ProcessNamespace, OurOwnNamespacesNeedNoTranslation) {
  auto tids = node_tids_in_pid_namespace_of(::getpid(), {12345, 7});
  ASSERT_TRUE(tids.ok()) << tids.error().message;
  EXPECT_EQ(*tids, (std::vector<int>{12345, 7}));
  auto root = root_prefix_of(::getpid());
  ASSERT_TRUE(root.ok()) << root.error().message;
  EXPECT_EQ(*root, "");
  EXPECT_EQ(under_root("", "/run/x.sock"), "/run/x.sock");
  EXPECT_EQ(under_root("/proc/7/root", "/run/x.sock"), "/proc/7/root/run/x.sock");
  EXPECT_EQ(under_root("/proc/7/root", "/proc/7/fd/3"), "/proc/7/fd/3");
  EXPECT_EQ(under_root("/proc/7/root", "relative"), "relative");
  EXPECT_EQ(under_root("/proc/7/root", ""), "");
  auto gone = root_prefix_of(0x3ffffff0);
  EXPECT_FALSE(gone.ok());
}

// The child of `parent` (its only one), from /proc/<parent>/task/<parent>/children.
int only_child_of(pid_t parent) {
  for (int i = 0; i < 500; ++i) {
    auto text = read_file("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children", 4096);
    if (text) {
      auto v = parse_u64(trim(*text), 10);
      if (v) return static_cast<int>(*v);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

TEST(ProcessNamespace, ATaskInAnotherPidNamespaceIsFoundByItsIdThere) {
  // unshare forks `sleep` as pid 1 of a new pid namespace, in a new mount
  // namespace. Root makes them directly, as a node agent's host does; anyone
  // else needs a new user namespace to own them (which the kernel refuses
  // inside a chroot). The new namespace's /proc is mounted only once every
  // mount it can see is private, so that it cannot reach this one's /proc:
  // `unshare --propagation private` cannot do that in a chroot, whose / is no
  // mount point.
  const bool as_root = ::geteuid() == 0;
  const char* script =
      "mount --make-rprivate / 2>/dev/null ||"
      " for m in $(awk '{ print $5 }' /proc/self/mountinfo); do mount --make-private \"$m\" 2>/dev/null; done;"
      " mount -t proc kthost-test-proc /proc && exec sleep 30";
  pid_t unshare_pid = ::fork();
  ASSERT_GE(unshare_pid, 0);
  if (unshare_pid == 0) {
    if (as_root)
      ::execlp("unshare", "unshare", "--pid", "--fork", "--mount", "--propagation", "unchanged", "sh", "-c", script,
               static_cast<char*>(nullptr));
    else
      ::execlp("unshare", "unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--mount-proc",
               "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int inner = only_child_of(unshare_pid);
  ASSERT_GT(inner, 0) << "unshare(1) started no child: "
                      << (as_root ? "are pid and mount namespaces allowed here?" : "are user namespaces allowed here?");
  // Wait until the child is sleep in its new namespace, not still unshare's fork.
  for (int i = 0; i < 500; ++i) {
    auto comm = read_file("/proc/" + std::to_string(inner) + "/comm", 64);
    if (comm && trim(*comm) == "sleep") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto tid = node_tids_in_pid_namespace_of(inner, {1});
  auto root = root_prefix_of(inner);
  auto missing = node_tids_in_pid_namespace_of(inner, {1, 2});
  ::kill(unshare_pid, SIGKILL);
  ::kill(inner, SIGKILL);
  ::waitpid(unshare_pid, nullptr, 0);
  ASSERT_TRUE(tid.ok()) << tid.error().message;
  EXPECT_EQ(*tid, std::vector<int>{inner}) << "pid 1 there is the sleep, " << inner << " here";
  ASSERT_TRUE(root.ok()) << root.error().message;
  EXPECT_EQ(*root, "/proc/" + std::to_string(inner) + "/root");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("has id 2 there"), std::string::npos) << missing.error().message;
}

TEST(ConnectUnix, APathLongerThanSunPathIsReachedThroughItsDirectory) {
  char tmpl[] = "/tmp/kt-long-sock-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  for (int i = 0; i < 4; ++i) {
    dir += "/a-rather-long-directory-name-" + std::to_string(i);
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  }
  std::string path = dir + "/org.kthost.0.sock";
  ASSERT_GT(path.size(), sizeof(sockaddr_un::sun_path));
  // Bind the listener the same way (its own short name through the directory).
  UniqueFd dfd(::open(dir.c_str(), O_PATH | O_DIRECTORY));
  ASSERT_TRUE(dfd.valid());
  std::string short_name = "/proc/self/fd/" + std::to_string(dfd.get()) + "/org.kthost.0.sock";
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, short_name.c_str(), short_name.size() + 1);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  auto fd = connect_unix(path, std::chrono::milliseconds(500));
  EXPECT_TRUE(fd.ok()) << fd.error().message;
  auto absent = connect_unix(dir + "/absent.sock", std::chrono::milliseconds(50));
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.error().message.find("absent.sock"), std::string::npos) << absent.error().message;
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace kt
