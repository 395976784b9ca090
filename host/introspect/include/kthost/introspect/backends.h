// The real GuestMemory backends, and choosing one for a running VM.
#pragma once

#include <memory>
#include <string>

#include "kthost/common/fd.h"
#include "kthost/introspect/guest_memory.h"
#include "kthost/vm/monitor.h"
#include "kthost/vm/vm_description.h"

namespace kt {

// The guest's RAM layout as QEMU reports it in HMP "info mtree -f": every
// flat-view range backed by the RAM block that holds guest-physical 1 MiB,
// merged where both the address and the backing offset are contiguous.
// `ram_name` receives that block's name ("ram0", "pc.ram", ...).
Result<PhysMap> parse_mtree_ram(const std::string& mtree_text, std::string* ram_name = nullptr);
// Asks QEMU, and falls back to the machine type's default split when the
// monitor's answer cannot be parsed.
Result<PhysMap> discover_phys_map(Monitor& monitor, const VmDescription& vm);

// mmap of the shared RAM backing, read-only. Reads are memcpy from the mapping,
// which stays for the object's lifetime.
class MmapMemory final : public GuestMemory {
 public:
  // `path` is the backing file, or /proc/<pid>/fd/N for a memfd backend.
  static Result<std::unique_ptr<MmapMemory>> open(const std::string& path, PhysMap map);
  ~MmapMemory() override;
  Status read(uint64_t gpa, void* out, size_t len) const override;
  const PhysMap& phys_map() const override { return map_; }
  // pwrite through a second, writable descriptor of the backing (the mapping
  // stays read-only), opened at the first write.
  Status write_word(uint64_t gpa, uint64_t value) override;
  std::string backend_name() const override { return "mmap"; }
  // Direct view of [gpa, gpa+len) when it lies in one region (no copy).
  const uint8_t* view(uint64_t gpa, uint64_t len) const;

 private:
  MmapMemory() = default;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  PhysMap map_;
  std::string path_;
  UniqueFd write_fd_;
};

// QEMU process memory: HMP gpa2hva gives the host address of each RAM region,
// then process_vm_readv (or /proc/<pid>/mem when that is refused) reads it.
class ProcessMemory final : public GuestMemory {
 public:
  static Result<std::unique_ptr<ProcessMemory>> open(Monitor& monitor, int pid, PhysMap map);
  Status read(uint64_t gpa, void* out, size_t len) const override;
  const PhysMap& phys_map() const override { return map_; }
  // process_vm_writev, or /proc/<pid>/mem when that is refused.
  Status write_word(uint64_t gpa, uint64_t value) override;
  std::string backend_name() const override { return "process"; }

 private:
  ProcessMemory() = default;
  Status read_host(uint64_t hva, void* out, size_t len) const;
  int pid_ = 0;
  PhysMap map_;        // backing_offset of each region = its host virtual address
  mutable UniqueFd mem_fd_;  // /proc/<pid>/mem, opened lazily as the fallback
  mutable bool use_proc_mem_ = false;
  UniqueFd mem_write_fd_;    // /proc/<pid>/mem for writing, opened lazily
  bool write_proc_mem_ = false;
};

// Parses "Host virtual address for 0x1000 (ram0) is 0x7fb35c000000".
Result<uint64_t> parse_gpa2hva(const std::string& text);

// QEMU monitor "xp": about 1 KiB per round trip. The baseline for benchmarks
// and the last resort; not used by default.
class MonitorMemory final : public GuestMemory {
 public:
  MonitorMemory(Monitor& monitor, PhysMap map) : monitor_(monitor), map_(std::move(map)) {}
  Status read(uint64_t gpa, void* out, size_t len) const override;
  const PhysMap& phys_map() const override { return map_; }
  std::string backend_name() const override { return "xp"; }

 private:
  Monitor& monitor_;
  PhysMap map_;
};

enum class BackendChoice { Auto, Mmap, Process, Monitor };
Result<BackendChoice> parse_backend_choice(const std::string& text);

// Opens guest memory for a running VM: the shared backing when there is one
// (Auto, Mmap), else QEMU process memory.
Result<std::unique_ptr<GuestMemory>> open_guest_memory(Monitor& monitor, const VmDescription& vm,
                                                       BackendChoice choice);

}  // namespace kt
