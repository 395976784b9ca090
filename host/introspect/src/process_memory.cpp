#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kthost/common/strings.h"
#include "kthost/introspect/backends.h"
#include "kthost/vm/ram_backing.h"

namespace kt {

Result<uint64_t> parse_gpa2hva(const std::string& text) {
  size_t pos = text.rfind(" is 0x");
  if (pos == std::string::npos)
    return Error(ErrorCode::Protocol, "gpa2hva: unexpected answer: " + sanitize_name(text, 120));
  auto v = parse_u64(trim(std::string_view(text).substr(pos + 4)), 0);
  if (!v) return Error(ErrorCode::Protocol, "gpa2hva: bad address in: " + sanitize_name(text, 120));
  return *v;
}

Result<std::unique_ptr<ProcessMemory>> ProcessMemory::open(Monitor& monitor, int pid, PhysMap map) {
  std::vector<RamRegion> host_regions;
  for (const auto& r : map.regions()) {
    KT_ASSIGN_OR_RETURN(std::string answer, monitor.hmp("gpa2hva " + hex(r.gpa)));
    KT_ASSIGN_OR_RETURN(uint64_t hva, parse_gpa2hva(answer));
    host_regions.push_back({r.gpa, r.size, hva});
  }
  auto mem = std::unique_ptr<ProcessMemory>(new ProcessMemory());
  mem->pid_ = pid;
  mem->map_ = PhysMap(std::move(host_regions));
  // Prove access now, so that a permission problem is reported at open.
  uint8_t probe[8];
  KT_TRY(mem->read(mem->map_.regions().front().gpa, probe, sizeof probe));
  return mem;
}

Status ProcessMemory::read_host(uint64_t hva, void* out, size_t len) const {
  if (!use_proc_mem_) {
    iovec local{out, len};
    iovec remote{reinterpret_cast<void*>(hva), len};
    ssize_t n = ::process_vm_readv(pid_, &local, 1, &remote, 1, 0);
    if (n == static_cast<ssize_t>(len)) return {};
    if (n < 0 && errno != EPERM && errno != ENOSYS)
      return io_error("process_vm_readv of QEMU pid " + std::to_string(pid_) + " at " + hex(hva), errno);
    use_proc_mem_ = true;  // refused (e.g. seccomp or yama); /proc/<pid>/mem may still work
  }
  std::string path = "/proc/" + std::to_string(pid_) + "/mem";
  if (!mem_fd_.valid()) {
    mem_fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!mem_fd_.valid()) return io_error("open " + path, errno);
  }
  ssize_t n = ::pread(mem_fd_.get(), out, len, static_cast<off_t>(hva));
  if (n != static_cast<ssize_t>(len)) return io_error("pread " + path + " at " + hex(hva), n < 0 ? errno : EIO);
  return {};
}

Status ProcessMemory::write_word(uint64_t gpa, uint64_t value) {
  KT_ASSIGN_OR_RETURN(uint64_t hva, word_backing_offset(map_, gpa));  // backing offsets are QEMU addresses
  if (!write_proc_mem_) {
    iovec local{&value, 8};
    iovec remote{reinterpret_cast<void*>(hva), 8};
    ssize_t n = ::process_vm_writev(pid_, &local, 1, &remote, 1, 0);
    if (n == 8) return {};
    if (n < 0 && errno != EPERM && errno != ENOSYS)
      return io_error("process_vm_writev of QEMU pid " + std::to_string(pid_) + " at " + hex(hva), errno);
    write_proc_mem_ = true;
  }
  std::string path = "/proc/" + std::to_string(pid_) + "/mem";
  if (!mem_write_fd_.valid()) {
    mem_write_fd_.reset(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!mem_write_fd_.valid()) return io_error("open " + path + " for writing", errno);
  }
  ssize_t n = ::pwrite(mem_write_fd_.get(), &value, 8, static_cast<off_t>(hva));
  if (n != 8) return io_error("pwrite " + path + " at " + hex(hva), n < 0 ? errno : EIO);
  return {};
}

Status ProcessMemory::read(uint64_t gpa, void* out, size_t len) const {
  // The regions' backing offsets are QEMU's host virtual addresses.
  return map_.read_runs(gpa, out, len,
                        [this](uint64_t hva, uint8_t* dst, size_t n) { return read_host(hva, dst, n); });
}

Status MonitorMemory::read(uint64_t gpa, void* out, size_t len) const {
  if (!map_.contains(gpa, len)) return not_ram_error(gpa);
  auto* dst = static_cast<uint8_t*>(out);
  // xp prints 8-byte words; read whole words covering the range.
  uint64_t first = gpa & ~7ull;
  uint64_t end = gpa + len;
  for (uint64_t at = first; at < end;) {
    uint64_t words = std::min<uint64_t>(128, (end - at + 7) / 8);
    KT_ASSIGN_OR_RETURN(std::string text,
                        monitor_.hmp("xp /" + std::to_string(words) + "gx " + hex(at)));
    uint64_t got = 0;
    for (auto line : split(text, '\n')) {
      size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      for (auto tok : split(line.substr(colon + 1), ' ')) {
        if (tok.empty()) continue;
        auto v = parse_u64(trim(tok), 0);
        if (!v) return Error(ErrorCode::Protocol, "xp: bad word in answer");
        uint64_t word_addr = at + 8 * got++;
        for (int b = 0; b < 8; ++b) {
          uint64_t a = word_addr + static_cast<uint64_t>(b);
          if (a >= gpa && a < end) dst[a - gpa] = static_cast<uint8_t>(*v >> (8 * b));
        }
      }
    }
    if (got != words) return Error(ErrorCode::Protocol, "xp: expected " + std::to_string(words) + " words, got " + std::to_string(got));
    at += words * 8;
  }
  return {};
}

Result<BackendChoice> parse_backend_choice(const std::string& text) {
  if (text == "auto") return BackendChoice::Auto;
  if (text == "mmap") return BackendChoice::Mmap;
  if (text == "process") return BackendChoice::Process;
  if (text == "xp") return BackendChoice::Monitor;
  return Error(ErrorCode::InvalidArgument, "backend must be auto, mmap, process or xp, not '" + text + "'");
}

Result<std::unique_ptr<GuestMemory>> open_guest_memory(Monitor& monitor, const VmDescription& vm,
                                                       BackendChoice choice) {
  KT_ASSIGN_OR_RETURN(PhysMap map, discover_phys_map(monitor, vm));
  bool shared = vm.ram_backend != RamBackend::None;
  if (choice == BackendChoice::Mmap && !shared)
    return Error(ErrorCode::Unsupported, "the VM has no shared RAM backing; use --backend process");
  if ((choice == BackendChoice::Auto || choice == BackendChoice::Mmap) && shared) {
    std::string path = vm.ram_path;
    if (vm.ram_backend == RamBackend::Memfd) {
      KT_ASSIGN_OR_RETURN(path, find_memfd_backing(vm.pid, vm.ram_size));
    }
    auto mem = MmapMemory::open(path, map);
    if (mem) return std::unique_ptr<GuestMemory>(std::move(*mem));
    if (choice == BackendChoice::Mmap) return mem.take_error();
  }
  if (choice == BackendChoice::Monitor) return std::unique_ptr<GuestMemory>(new MonitorMemory(monitor, map));
  KT_ASSIGN_OR_RETURN(auto proc, ProcessMemory::open(monitor, vm.pid, map));
  return std::unique_ptr<GuestMemory>(std::move(proc));
}

}  // namespace kt
