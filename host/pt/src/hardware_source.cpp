#include "kthost/pt/hardware_source.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "kthost/common/fd.h"

namespace kt {
namespace {

// An mmap that unmaps itself.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t len) : addr_(addr), len_(len) {}
  ~Mapping() {
    if (addr_) ::munmap(addr_, len_);
  }
  Mapping(Mapping&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)), len_(o.len_) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      if (addr_) ::munmap(addr_, len_);
      addr_ = std::exchange(o.addr_, nullptr);
      len_ = o.len_;
    }
    return *this;
  }
  uint8_t* bytes() const { return static_cast<uint8_t*>(addr_); }

 private:
  void* addr_ = nullptr;
  size_t len_ = 0;
};

std::string open_hint(int err) {
  switch (err) {
    case ENOENT:
    case ENODEV:
      return "the kernel has no PMU of this type: intel_pt is absent (no Intel PT, or not passed to this VM)";
    case EACCES:
    case EPERM:
      return "not allowed: run as root or lower kernel.perf_event_paranoid (kernel tracing needs <= 1)";
    case ESRCH:
      return "no such thread: is the vCPU thread id right and QEMU still running?";
    case EINVAL:
      return "the kernel rejected the intel_pt config (see kthost doctor and the PMU's caps)";
    case EBUSY:
      return "PT is busy: another tracer (or KVM with pt_mode=1) owns it";
    default:
      return "see kthost doctor";
  }
}

}  // namespace

struct PtHardwareSource::Stream {
  PtThread thread;
  std::string path;
  UniqueFd event;
  UniqueFd out;
  Mapping base;  // control page + data ring
  Mapping aux;   // AUX ring
  std::optional<AuxRingConsumer> consumer;
};

namespace {

Status write_out(int fd, const std::string& path, std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write " + path, errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ok_status();
}

Result<std::unique_ptr<PtHardwareSource::Stream>> open_stream(const perf_event_attr& attr, const PtConfig& config,
                                                              const PtThread& thread, const std::string& out_dir,
                                                              uint64_t page) {
  auto s = std::make_unique<PtHardwareSource::Stream>();
  s->thread = thread;
  std::string what = "intel_pt (perf type " + std::to_string(attr.type) + ") on vCPU " +
                     std::to_string(thread.vcpu) + " thread " + std::to_string(thread.tid);
  perf_event_attr a = attr;
  long fd = ::syscall(SYS_perf_event_open, &a, thread.tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    Error e = io_error("perf_event_open " + what, err);
    if (err == ENOENT || err == ENODEV) e.code = ErrorCode::Unsupported;
    return Error(e.code, e.message + " (" + open_hint(err) + ")");
  }
  s->event.reset(static_cast<int>(fd));

  size_t base_len = static_cast<size_t>(page + config.data_bytes);
  void* base = ::mmap(nullptr, base_len, PROT_READ | PROT_WRITE, MAP_SHARED, s->event.get(), 0);
  if (base == MAP_FAILED) return io_error("mmap data ring of " + what, errno);
  s->base = Mapping(base, base_len);
  auto* header = static_cast<perf_event_mmap_page*>(base);
  // The AUX area is requested through the control page, then mapped.
  header->aux_offset = page + config.data_bytes;
  header->aux_size = config.aux_bytes;
  void* aux = ::mmap(nullptr, static_cast<size_t>(config.aux_bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                     s->event.get(), static_cast<off_t>(header->aux_offset));
  if (aux == MAP_FAILED) return io_error("mmap AUX ring (" + std::to_string(config.aux_bytes) + " bytes) of " + what, errno);
  s->aux = Mapping(aux, static_cast<size_t>(config.aux_bytes));

  PerfRingLayout layout{header, s->base.bytes() + page, config.data_bytes, s->aux.bytes(), config.aux_bytes};
  KT_ASSIGN_OR_RETURN(AuxRingConsumer consumer, AuxRingConsumer::create(layout));
  s->consumer.emplace(std::move(consumer));

  s->path = out_dir + "/vcpu" + std::to_string(thread.vcpu) + ".pt";
  s->out.reset(::open(s->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!s->out.valid()) return io_error("create " + s->path, errno);
  return s;
}

}  // namespace

Result<std::unique_ptr<PtHardwareSource>> PtHardwareSource::open(const PtPmu& pmu, const PtConfig& config,
                                                                 const std::vector<PtThread>& threads,
                                                                 const std::string& out_dir) {
  if (threads.empty()) return Error(ErrorCode::InvalidArgument, "no vCPU threads to trace");
  std::set<unsigned> seen;
  for (const auto& t : threads) {
    if (!seen.insert(t.vcpu).second)
      return Error(ErrorCode::InvalidArgument, "vCPU " + std::to_string(t.vcpu) + " listed twice");
    if (t.tid <= 0) return Error(ErrorCode::InvalidArgument, "vCPU " + std::to_string(t.vcpu) + ": bad thread id");
  }
  uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  KT_TRY(validate_ring_sizes(config, page));
  KT_ASSIGN_OR_RETURN(perf_event_attr attr, build_intel_pt_attr(pmu, config));

  std::unique_ptr<PtHardwareSource> source(new PtHardwareSource());
  for (const auto& t : threads) {
    KT_ASSIGN_OR_RETURN(auto stream, open_stream(attr, config, t, out_dir, page));
    source->streams_.push_back(std::move(stream));
  }
  return source;
}

Result<std::unique_ptr<PtHardwareSource>> PtHardwareSource::open_system(const PtConfig& config,
                                                                        const std::vector<PtThread>& threads,
                                                                        const std::string& out_dir,
                                                                        const std::string& pmu_dir) {
  KT_ASSIGN_OR_RETURN(PtPmu pmu, PtPmu::load(pmu_dir));
  return open(pmu, config, threads, out_dir);
}

PtHardwareSource::~PtHardwareSource() {
  if (enabled_) (void)disable();
}

Status PtHardwareSource::enable() {
  for (auto& s : streams_)
    if (::ioctl(s->event.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
      return io_error("enable intel_pt on thread " + std::to_string(s->thread.tid), errno);
  enabled_ = true;
  return ok_status();
}

Status PtHardwareSource::disable() {
  Status first;
  for (auto& s : streams_)
    if (::ioctl(s->event.get(), PERF_EVENT_IOC_DISABLE, 0) != 0 && first)
      first = io_error("disable intel_pt on thread " + std::to_string(s->thread.tid), errno);
  enabled_ = false;
  return first;
}

Status PtHardwareSource::drain() {
  Status first;
  for (auto& s : streams_) {
    int fd = s->out.get();
    const std::string& path = s->path;
    Status st = s->consumer->drain([fd, &path](std::span<const uint8_t> bytes) { return write_out(fd, path, bytes); });
    if (!st && first) first = st.error().with_context("vCPU " + std::to_string(s->thread.vcpu));
  }
  return first;
}

std::vector<VcpuCaptureStats> PtHardwareSource::stats() const {
  std::vector<VcpuCaptureStats> out;
  for (const auto& s : streams_) out.push_back({s->thread.vcpu, s->thread.tid, s->path, s->consumer->stats()});
  return out;
}

}  // namespace kt
