#include "kthost/snapshot/snapshot.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kthost/common/fd.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"

namespace kt {

std::string build_kcore_header(const std::vector<ElfSegment>& segments, std::vector<uint64_t>* offsets) {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
  eh.e_type = ET_CORE;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = static_cast<Elf64_Half>(segments.size());
  std::string out(reinterpret_cast<const char*>(&eh), sizeof eh);
  uint64_t offset = sizeof(Elf64_Ehdr) + segments.size() * sizeof(Elf64_Phdr);
  offset = (offset + 4095) & ~4095ull;
  offsets->clear();
  for (const auto& s : segments) {
    Elf64_Phdr ph{};
    ph.p_type = PT_LOAD;
    ph.p_flags = PF_R | (s.executable ? PF_X : 0);
    ph.p_offset = offset;
    ph.p_vaddr = s.vaddr;
    ph.p_paddr = s.paddr;
    ph.p_filesz = s.size;
    ph.p_memsz = s.size;
    ph.p_align = 4096;
    out.append(reinterpret_cast<const char*>(&ph), sizeof ph);
    offsets->push_back(offset);
    offset = (offset + s.size + 4095) & ~4095ull;
  }
  return out;
}

static Status pwrite_all(int fd, const void* data, size_t len, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::pwrite(fd, p, len, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write " + path, errno);
    }
    p += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return {};
}

Result<SnapshotSummary> write_kcore(PageWalker& walker, const KernelLayout& layout, const KcoreWriter& write,
                                    const std::function<void(uint64_t, uint64_t)>& progress) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<ElfSegment> segments;
  uint64_t total = 0;
  for (const auto& r : layout.ranges) {
    auto phys = walker.virt_to_phys(r.start);
    segments.push_back({r.start, phys ? *phys : 0, r.size(), true});
    total += r.size();
  }
  std::vector<uint64_t> offsets;
  std::string header = build_kcore_header(segments, &offsets);
  KT_TRY(write(0, reinterpret_cast<const uint8_t*>(header.data()), header.size()));
  SnapshotSummary summary;
  std::vector<uint8_t> chunk(1u << 20);
  uint64_t done = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = segments[i];
    for (uint64_t at = 0; at < seg.size; at += chunk.size()) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), seg.size - at));
      if (!walker.read_virtual(seg.vaddr + at, chunk.data(), n).ok()) {
        // Page by page, so one page unmapped since discovery costs only itself.
        for (size_t p = 0; p < n; p += 4096) {
          size_t m = std::min<size_t>(4096, n - p);
          if (!walker.read_virtual(seg.vaddr + at + p, chunk.data() + p, m).ok()) {
            std::memset(chunk.data() + p, 0, m);
            ++summary.unreadable_pages;
            if (summary.unreadable_addresses.size() < 16) summary.unreadable_addresses.push_back(seg.vaddr + at + p);
          }
        }
      }
      KT_TRY(write(offsets[i] + at, chunk.data(), n));
      done += n;
      if (progress) progress(done, total);
    }
  }
  summary.bytes_written = done;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

Result<std::string> kcore_image(PageWalker& walker, const KernelLayout& layout, SnapshotSummary* summary) {
  std::string image;
  auto written = write_kcore(walker, layout, [&image](uint64_t offset, const uint8_t* data, size_t len) -> Status {
    if (offset + len > image.size()) image.resize(offset + len);
    std::memcpy(image.data() + offset, data, len);
    return ok_status();
  });
  if (!written) return written.take_error();
  if (summary) *summary = *written;
  return image;
}

Result<SnapshotSummary> write_snapshot(PageWalker& walker, const KernelLayout& layout,
                                       const std::string& kallsyms_text, const std::string& modules_text,
                                       const std::string& dir,
                                       const std::function<void(uint64_t, uint64_t)>& progress) {
  auto t0 = std::chrono::steady_clock::now();
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return io_error("mkdir " + dir, errno);
  std::string path = dir + "/kcore";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return io_error("create " + path, errno);
  auto written = write_kcore(
      walker, layout,
      [&](uint64_t offset, const uint8_t* data, size_t len) { return pwrite_all(fd.get(), data, len, offset, path); },
      progress);
  if (!written) return written.take_error();
  SnapshotSummary summary = *written;
  if (::fsync(fd.get()) != 0) return io_error("fsync " + path, errno);
  KT_TRY(write_file_atomic(dir + "/kallsyms", kallsyms_text));
  KT_TRY(write_file_atomic(dir + "/modules", modules_text));
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  KT_TRY(write_file_atomic(dir + "/layout.json", layout_to_json(layout, &summary) + "\n"));
  return summary;
}

std::string layout_to_json(const KernelLayout& layout, const SnapshotSummary* summary) {
  using nlohmann::json;
  json ranges = json::array();
  for (const auto& r : layout.ranges)
    ranges.push_back({{"start", hex(r.start)}, {"end", hex(r.end)}, {"size", r.size()},
                      {"kind", text_kind_name(r.kind)}, {"name", r.name}});
  json doc = {{"kernel_release", layout.release},
              {"kaslr_base", hex(layout.text_start)},
              {"kaslr_offset", hex(layout.kaslr_offset)},
              {"paging", layout.paging.mode == PagingMode::Level5 ? "5-level" : "4-level"},
              {"pti", layout.pti},
              {"cr3", hex(layout.cr3)},
              {"cr4", hex(layout.cr4)},
              {"page_table_root", hex(layout.paging.root)},
              {"kernel_text", {{"start", hex(layout.text_start)}, {"end", hex(layout.text_end)},
                               {"size", layout.text_end - layout.text_start}}},
              {"total_text_bytes", layout.total_text_bytes()},
              {"ranges", ranges}};
  if (summary) {
    json missing = json::array();
    for (auto a : summary->unreadable_addresses) missing.push_back(hex(a));
    doc["snapshot"] = {{"bytes", summary->bytes_written}, {"seconds", summary->seconds},
                       {"unreadable_pages", summary->unreadable_pages}, {"unreadable_first", missing}};
  }
  return doc.dump(2);
}

}  // namespace kt
