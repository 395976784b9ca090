#include "kthost/pt/kvm_tsc.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "kthost/common/io.h"
#include "kthost/common/strings.h"

namespace kt {
namespace {

constexpr size_t kMaxValueBytes = 256;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Result<std::vector<std::string>> list_dir(const std::string& path, size_t max_entries) {
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return io_error("opendir " + path, errno);
  std::vector<std::string> names;
  bool too_many = false;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (names.size() >= max_entries) {
      too_many = true;
      break;
    }
    names.push_back(std::move(name));
  }
  ::closedir(dir);
  if (too_many)
    return Error(ErrorCode::LimitExceeded, path + ": more than " + std::to_string(max_entries) + " entries");
  return names;
}

template <typename T>
Result<T> read_value(const std::string& path, Result<T> (*parse)(std::string_view)) {
  auto text = read_file(path, kMaxValueBytes);
  if (!text) return text.take_error();
  auto value = parse(*text);
  if (!value) return value.error().with_context(path);
  return value;
}

std::optional<unsigned> vcpu_index(std::string_view name) {
  if (!starts_with(name, "vcpu")) return std::nullopt;
  auto v = parse_u64(name.substr(4), 10);
  if (!v || *v >= kMaxKvmVcpus) return std::nullopt;
  return static_cast<unsigned>(*v);
}

}  // namespace

uint64_t VcpuTsc::guest_tsc(uint64_t host_tsc) const {
  uint64_t scaled = host_tsc;
  if (ratio) {
    unsigned __int128 product = static_cast<unsigned __int128>(host_tsc) * *ratio;
    scaled = static_cast<uint64_t>(product >> frac_bits);
  }
  return scaled + static_cast<uint64_t>(offset);
}

const VcpuTsc* KvmVmTsc::vcpu(unsigned index) const {
  for (const auto& v : vcpus)
    if (v.vcpu == index) return &v;
  return nullptr;
}

Result<int64_t> parse_kvm_signed(std::string_view text) {
  text = trim(text);
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 10);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
    return Error(ErrorCode::InvalidInput, "expected a signed decimal, got \"" + sanitize_name(text, 64) + "\"");
  return value;
}

Result<uint64_t> parse_kvm_unsigned(std::string_view text) {
  text = trim(text);
  auto value = parse_u64(text, 10);
  if (!value)
    return Error(ErrorCode::InvalidInput, "expected an unsigned decimal, got \"" + sanitize_name(text, 64) + "\"");
  return *value;
}

Result<VcpuTsc> read_vcpu_tsc(const std::string& vcpu_dir, unsigned index) {
  VcpuTsc tsc;
  tsc.vcpu = index;
  KT_ASSIGN_OR_RETURN(tsc.offset, read_value<int64_t>(vcpu_dir + "/tsc-offset", parse_kvm_signed));
  std::string ratio_path = vcpu_dir + "/tsc-scaling-ratio";
  std::string frac_path = vcpu_dir + "/tsc-scaling-ratio-frac-bits";
  if (!exists(ratio_path)) return tsc;  // KVM without TSC scaling creates neither file
  KT_ASSIGN_OR_RETURN(uint64_t ratio, read_value<uint64_t>(ratio_path, parse_kvm_unsigned));
  if (ratio == 0) return Error(ErrorCode::InvalidInput, ratio_path + ": a scaling ratio of 0 is impossible");
  if (!exists(frac_path))
    return Error(ErrorCode::InvalidInput, frac_path + ": missing while " + ratio_path + " exists");
  KT_ASSIGN_OR_RETURN(uint64_t frac, read_value<uint64_t>(frac_path, parse_kvm_unsigned));
  if (frac > 63)
    return Error(ErrorCode::InvalidInput, frac_path + ": " + std::to_string(frac) + " fraction bits (at most 63)");
  tsc.ratio = ratio;
  tsc.frac_bits = static_cast<unsigned>(frac);
  return tsc;
}

Result<KvmVmTsc> read_kvm_vm_tsc(const std::string& vm_dir) {
  KvmVmTsc vm;
  vm.dir = vm_dir;
  KT_ASSIGN_OR_RETURN(auto names, list_dir(vm_dir, 4 * kMaxKvmVcpus));
  for (const auto& name : names) {
    auto index = vcpu_index(name);
    if (!index) continue;  // other per-VM files (pit, mmu stats, ...)
    KT_ASSIGN_OR_RETURN(VcpuTsc tsc, read_vcpu_tsc(vm_dir + "/" + name, *index));
    vm.vcpus.push_back(tsc);
  }
  if (vm.vcpus.empty()) return Error(ErrorCode::NotPresent, vm_dir + ": no vcpu<N> directories");
  std::sort(vm.vcpus.begin(), vm.vcpus.end(), [](const VcpuTsc& a, const VcpuTsc& b) { return a.vcpu < b.vcpu; });
  return vm;
}

Result<KvmVmTsc> read_kvm_tsc(int pid, const std::string& kvm_debugfs) {
  if (!exists(kvm_debugfs))
    return Error(ErrorCode::Unsupported, kvm_debugfs + " does not exist: mount debugfs "
                                                       "(mount -t debugfs none /sys/kernel/debug) on a KVM host");
  KT_ASSIGN_OR_RETURN(auto names, list_dir(kvm_debugfs, 65536));
  std::string prefix = std::to_string(pid) + "-";
  std::vector<std::string> matches;
  for (const auto& name : names)
    if (starts_with(name, prefix) && parse_u64(std::string_view(name).substr(prefix.size()), 10))
      matches.push_back(name);
  if (matches.empty())
    return Error(ErrorCode::NotPresent, kvm_debugfs + ": no VM of process " + std::to_string(pid) +
                                            " (no " + prefix + "<fd> directory; is it a KVM QEMU?)");
  if (matches.size() > 1) {
    std::sort(matches.begin(), matches.end());
    std::string list;
    for (const auto& m : matches) list += (list.empty() ? "" : ", ") + m;
    return Error(ErrorCode::InvalidArgument,
                 "process " + std::to_string(pid) + " has several KVM VMs (" + list + "); pick one directory");
  }
  return read_kvm_vm_tsc(kvm_debugfs + "/" + matches.front());
}

}  // namespace kt
