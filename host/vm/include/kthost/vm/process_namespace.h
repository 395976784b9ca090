// A QEMU that runs in other namespaces than kthost: a KubeVirt virt-launcher
// pod (its own mount and pid namespaces) next to an agent on the node.
//
// What changes for kthost there:
//   - thread ids QEMU reports (query-cpus-fast) count in the pod's pid
//     namespace; /proc on the node knows them by other numbers;
//   - paths in the domain XML (channel sockets, the plugin's files, the RAM
//     backing file) are paths in the pod's filesystem; the node reaches them
//     as /proc/<pid>/root/PATH, through any process of the pod.
//
// The pod is named by a node pid inside it, the "anchor". kthost finds it in
// the libvirt URI: a per-pod libvirt socket is reached from the node as
// ...?socket=/proc/<anchor>/root/PATH, and that <anchor> is in the pod.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

// The anchor pid in a libvirt URI whose socket parameter is
// /proc/<N>/root/...; nullopt for any other URI.
std::optional<int> namespace_anchor_from_uri(std::string_view uri);

// The NSpid line of a /proc/<pid>/status text: the task's id in each pid
// namespace, outermost first. Empty when there is no such line or it is not
// a list of positive ids (at most 32, the kernel's nesting limit).
std::vector<int> parse_nspid(std::string_view status_text);

// The node's (our) ids of the tasks that the pid namespace of `anchor_pid`
// calls `ns_tids`, in the same order, found in one walk of /proc. Where that
// namespace is ours, `ns_tids` themselves. Errors: NotPresent naming the
// first id no task there has; Io when /proc cannot be read.
Result<std::vector<int>> node_tids_in_pid_namespace_of(int anchor_pid, const std::vector<int>& ns_tids);

// How kthost reaches the files of process `pid`: "" when it shares kthost's
// mount namespace, else "/proc/<pid>/root". Errors: Io (/proc/<pid>/ns/mnt
// unreadable: no such process, or no permission).
Result<std::string> root_prefix_of(int pid);

// `path` (absolute, as the process sees it) as kthost reaches it: prefix +
// path. Relative or empty paths are returned as they are.
std::string under_root(const std::string& prefix, const std::string& path);

}  // namespace kt
