#include "kthost/vm/process_namespace.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <functional>

#include "kthost/common/io.h"
#include "kthost/common/strings.h"

namespace kt {

namespace {

constexpr size_t kMaxPidNesting = 32;  // the kernel's MAX_PID_NS_LEVEL

std::optional<int> parse_pid(std::string_view text) {
  auto v = parse_u64(text, 10);
  if (!v || *v == 0 || *v > 0x3fffffff) return std::nullopt;  // PID_MAX_LIMIT is 4M; be generous, stay in int
  return static_cast<int>(*v);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; a malformed escape is kept as it is.
std::string percent_decoded(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      int hi = hex_digit(text[i + 1]), lo = hex_digit(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// The inode of /proc/<pid>/ns/<kind>: equal inodes, same namespace.
Result<ino_t> namespace_inode(const std::string& pid, const char* kind) {
  std::string path = "/proc/" + pid + "/ns/" + kind;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return io_error("stat " + path, errno);
  return st.st_ino;
}

// Calls `visit(dir_entry_name)` for each numeric entry of `dir`; stops when
// it returns true. Returns whether one did.
Result<bool> any_numeric_entry(const std::string& dir, const std::function<bool(const std::string&)>& visit) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return io_error("opendir " + dir, errno);
  bool hit = false;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    if (visit(e->d_name)) {
      hit = true;
      break;
    }
  }
  ::closedir(d);
  return hit;
}

}  // namespace

std::optional<int> namespace_anchor_from_uri(std::string_view uri) {
  auto q = uri.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  for (auto param : split(uri.substr(q + 1), '&')) {
    if (!starts_with(param, "socket=")) continue;
    std::string path = percent_decoded(param.substr(7));
    constexpr std::string_view kProc = "/proc/";
    if (!starts_with(path, kProc)) return std::nullopt;
    auto slash = path.find('/', kProc.size());
    if (slash == std::string::npos || path.compare(slash, 6, "/root/") != 0) return std::nullopt;
    return parse_pid(std::string_view(path).substr(kProc.size(), slash - kProc.size()));
  }
  return std::nullopt;
}

std::vector<int> parse_nspid(std::string_view status_text) {
  for (auto line : split(status_text, '\n')) {
    if (!starts_with(line, "NSpid:")) continue;
    std::vector<int> ids;
    for (auto word : split(line.substr(6), '\t')) {
      for (auto part : split(word, ' ')) {
        if (part.empty()) continue;
        auto id = parse_pid(part);
        if (!id || ids.size() == kMaxPidNesting) return {};
        ids.push_back(*id);
      }
    }
    return ids;
  }
  return {};
}

Result<std::vector<int>> node_tids_in_pid_namespace_of(int anchor_pid, const std::vector<int>& ns_tids) {
  KT_ASSIGN_OR_RETURN(ino_t ours, namespace_inode("self", "pid"));
  KT_ASSIGN_OR_RETURN(ino_t theirs, namespace_inode(std::to_string(anchor_pid), "pid"));
  if (ours == theirs) return ns_tids;
  // Every task of every process in that namespace, once: the ones whose
  // innermost id is wanted. Processes outside it are skipped by their ns inode.
  std::vector<int> found(ns_tids.size(), 0);
  size_t left = ns_tids.size();
  KT_ASSIGN_OR_RETURN(bool all, any_numeric_entry("/proc", [&](const std::string& pid) {
                        auto ns = namespace_inode(pid, "pid");
                        if (!ns || *ns != theirs) return false;
                        (void)any_numeric_entry("/proc/" + pid + "/task", [&](const std::string& tid) {
                          auto text = read_file("/proc/" + pid + "/task/" + tid + "/status", 1 << 16);
                          if (!text) return false;
                          auto ids = parse_nspid(*text);
                          if (ids.size() < 2) return false;
                          for (size_t i = 0; i < ns_tids.size(); ++i)
                            if (!found[i] && ids.back() == ns_tids[i]) found[i] = ids.front(), --left;
                          return left == 0;
                        });
                        return left == 0;
                      }));
  if (!all)
    for (size_t i = 0; i < ns_tids.size(); ++i)
      if (!found[i])
        return Error(ErrorCode::NotPresent, "no task of the pid namespace of pid " + std::to_string(anchor_pid) +
                                                " has id " + std::to_string(ns_tids[i]) +
                                                " there (NSpid in /proc/*/task/*/status)");
  return found;
}

Result<std::string> root_prefix_of(int pid) {
  KT_ASSIGN_OR_RETURN(ino_t ours, namespace_inode("self", "mnt"));
  KT_ASSIGN_OR_RETURN(ino_t theirs, namespace_inode(std::to_string(pid), "mnt"));
  return ours == theirs ? std::string() : "/proc/" + std::to_string(pid) + "/root";
}

std::string under_root(const std::string& prefix, const std::string& path) {
  if (prefix.empty() || path.empty() || path[0] != '/' || starts_with(path, "/proc/")) return path;
  return prefix + path;
}

}  // namespace kt
