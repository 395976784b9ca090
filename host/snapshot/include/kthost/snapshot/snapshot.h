// `kthost snapshot`: guest kernel text written as an ELF core file in
// /proc/kcore style (one PT_LOAD per text range at its virtual address),
// with kallsyms and modules beside it as in perf's kcore_dir, so that perf,
// gdb and objdump can read it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kthost/common/result.h"
#include "kthost/introspect/kernel_layout.h"

namespace kt {

struct ElfSegment {
  uint64_t vaddr = 0;
  uint64_t paddr = 0;
  uint64_t size = 0;
  bool executable = true;
};

// Writes an ELF64 ET_CORE header and program headers for `segments`; segment
// data is placed at page-aligned offsets returned in `offsets`. The caller
// then writes each segment's bytes at its offset.
std::string build_kcore_header(const std::vector<ElfSegment>& segments, std::vector<uint64_t>* offsets);

struct SnapshotSummary {
  uint64_t bytes_written = 0;
  uint64_t unreadable_pages = 0;     // pages unmapped between discovery and copy (zero-filled, counted)
  std::vector<uint64_t> unreadable_addresses;  // the first few of them
  double seconds = 0;
};

// Writes the kcore image of every range of `layout` through `write`: the
// header at offset 0, each range's bytes at its page-aligned offset. Pages
// unmapped since discovery are zero-filled and counted in the summary.
using KcoreWriter = std::function<Status(uint64_t offset, const uint8_t* data, size_t len)>;
Result<SnapshotSummary> write_kcore(PageWalker& walker, const KernelLayout& layout, const KcoreWriter& write,
                                    const std::function<void(uint64_t, uint64_t)>& progress = {});

// The kcore image in memory (what `kthost trace` puts into its bundle).
Result<std::string> kcore_image(PageWalker& walker, const KernelLayout& layout, SnapshotSummary* summary = nullptr);

// Copies every range of `layout` from guest memory into DIR/kcore, and writes
// DIR/kallsyms, DIR/modules (the guest's text, as given) and DIR/layout.json.
// `progress` is called with (bytes done, bytes total).
Result<SnapshotSummary> write_snapshot(PageWalker& walker, const KernelLayout& layout,
                                       const std::string& kallsyms_text, const std::string& modules_text,
                                       const std::string& dir,
                                       const std::function<void(uint64_t, uint64_t)>& progress = {});

// One PT_LOAD of a kcore file: text at a guest virtual address.
struct KcoreSegment {
  uint64_t vaddr = 0;
  std::vector<uint8_t> bytes;
};
// Every PT_LOAD with bytes in an ELF64 core file (`kthost snapshot`'s, a
// bundle's, perf's kcore_dir/kcore). The file is untrusted: the header, the
// program header table and every segment are bounds-checked. Errors: Io;
// InvalidInput naming the path and the offset of what is wrong.
Result<std::vector<KcoreSegment>> read_kcore_segments(const std::string& path);

// The layout as JSON (also what `kthost snapshot --json` prints).
std::string layout_to_json(const KernelLayout& layout, const SnapshotSummary* summary);

}  // namespace kt
