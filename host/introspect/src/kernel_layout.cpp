#include "kthost/introspect/kernel_layout.h"

#include <algorithm>
#include <cstring>

#include "kthost/common/strings.h"

namespace kt {

const char* text_kind_name(TextKind kind) {
  switch (kind) {
    case TextKind::Kernel: return "kernel";
    case TextKind::Module: return "module";
    case TextKind::Bpf: return "bpf";
    case TextKind::Other: return "other";
  }
  return "other";
}

uint64_t KernelLayout::total_text_bytes() const {
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.size();
  return total;
}

namespace {

// Executable mappings in [start, end), merged where virtually contiguous.
Result<std::vector<TextRange>> executable_runs(const PageWalker& walker, uint64_t start, uint64_t end) {
  std::vector<TextRange> runs;
  KT_TRY(walker.for_each_mapping(start, end, [&](const Translation& t) {
    if (!t.executable || t.user) return true;
    uint64_t s = std::max(t.virt_page, start);
    uint64_t e = std::min(t.virt_page + t.page_size, end);
    if (!runs.empty() && runs.back().end == s)
      runs.back().end = e;
    else
      runs.push_back({s, e, TextKind::Other, ""});
    return runs.size() < 100000;
  }));
  return runs;
}

bool maps_kernel_text(const PageWalker& walker) {
  bool found = false;
  auto st = walker.for_each_mapping(kKernelImageStart, kModulesStart, [&](const Translation& t) {
    found = t.executable && !t.user;
    return !found;
  });
  return st.ok() && found;
}

// Splits module-area runs by the modules and BPF symbols the guest reported.
void label_module_area(std::vector<TextRange>& runs, const GuestSymbols& symbols, std::vector<TextRange>* out) {
  for (const auto& run : runs) {
    uint64_t at = run.start;
    std::vector<TextRange> pieces;
    for (const auto& m : symbols.modules) {
      uint64_t s = std::max(m.base, run.start), e = std::min(m.base + m.size, run.end);
      if (s >= e) continue;
      pieces.push_back({s, e, TextKind::Module, m.name});
    }
    std::sort(pieces.begin(), pieces.end(), [](auto& a, auto& b) { return a.start < b.start; });
    for (const auto& p : pieces) {
      if (p.start > at) out->push_back({at, p.start, TextKind::Other, ""});
      out->push_back(p);
      at = std::max(at, p.end);
    }
    if (at < run.end) out->push_back({at, run.end, TextKind::Other, ""});
  }
  // BPF JIT images live in executable packs; name the pieces that hold bpf_prog_ symbols.
  for (auto& r : *out) {
    if (r.kind != TextKind::Other) continue;
    auto it = std::lower_bound(symbols.symbols.begin(), symbols.symbols.end(), r.start,
                               [](const KernelSymbol& s, uint64_t a) { return s.address < a; });
    for (; it != symbols.symbols.end() && it->address < r.end; ++it) {
      if (it->module == "bpf" || starts_with(it->name, "bpf_prog_")) {
        r.kind = TextKind::Bpf;
        r.name = "bpf";
        break;
      }
    }
  }
}

}  // namespace

Result<std::string> find_kernel_release(PageWalker& walker, const KernelLayout& layout, const GuestSymbols& symbols) {
  static const char kPrefix[] = "Linux version ";
  auto extract = [](const char* data, size_t len) -> std::string {
    std::string rel;
    for (size_t i = 0; i < len && data[i] > 0x20 && data[i] < 0x7f && rel.size() < 64; ++i) rel.push_back(data[i]);
    return rel;
  };
  if (const KernelSymbol* banner = symbols.find("linux_banner")) {
    char buf[128] = {};
    if (walker.read_virtual(banner->address, buf, sizeof buf - 1).ok() && starts_with(buf, kPrefix))
      return extract(buf + sizeof kPrefix - 1, sizeof buf - sizeof kPrefix);
  }
  // No symbols: scan the kernel image's read-only data after the text, a page
  // at a time, bounded to 32 MiB.
  std::vector<char> page(4096 + 128);
  uint64_t end = std::min<uint64_t>(layout.text_end + (32ull << 20), kModulesStart);
  for (uint64_t va = layout.text_end; va < end; va += 4096) {
    if (!walker.read_virtual(va, page.data(), 4096 + 127).ok() &&
        !walker.read_virtual(va, page.data(), 4096).ok())
      continue;
    for (size_t i = 0; i < 4096; ++i) {
      if (page[i] == 'L' && std::memcmp(&page[i], kPrefix, sizeof kPrefix - 1) == 0) {
        size_t avail = page.size() - i - (sizeof kPrefix - 1);
        std::string rel = extract(&page[i + sizeof kPrefix - 1], avail);
        if (!rel.empty() && std::isdigit(static_cast<unsigned char>(rel[0]))) return rel;
      }
    }
  }
  return Error(ErrorCode::NotPresent, "no \"Linux version\" banner found in the kernel image");
}

Result<KernelLayout> discover_kernel_layout(const GuestMemory& memory, const CpuRegisters& regs,
                                            const GuestSymbols& symbols) {
  KernelLayout layout;
  layout.cr3 = regs.cr3;
  layout.cr4 = regs.cr4;
  PagingMode mode = PageWalker::mode_from_cr4(regs.cr4);
  uint64_t root = PageWalker::root_from_cr3(regs.cr3, regs.cr4);
  // A vCPU in user mode under PTI runs on the user PGD, which maps almost no
  // kernel. Prefer the kernel half of the pair when it maps kernel text.
  std::vector<std::pair<uint64_t, bool>> candidates;
  if (root & 0x1000) candidates.push_back({PageWalker::pti_kernel_root(root), true});
  candidates.push_back({root, false});
  bool found = false;
  for (auto [candidate, pti] : candidates) {
    PageWalker probe(memory, PagingConfig{mode, candidate});
    if (maps_kernel_text(probe)) {
      layout.paging = PagingConfig{mode, candidate};
      layout.pti = pti;
      found = true;
      break;
    }
  }
  if (!found)
    return Error(ErrorCode::NotPresent, "CR3 " + hex(regs.cr3) + " maps no executable kernel text in " +
                                            hex(kKernelImageStart) + ".." + hex(kModulesStart));
  PageWalker walker(memory, layout.paging);
  KT_ASSIGN_OR_RETURN(auto core, executable_runs(walker, kKernelImageStart, kModulesStart));
  // The first executable run is _text.._etext; later runs (if any) are kept as kernel text too.
  layout.text_start = core.front().start;
  layout.text_end = core.front().end;
  layout.kaslr_offset = layout.text_start - kDefaultTextBase;
  for (auto& r : core) {
    r.kind = TextKind::Kernel;
    r.name = "vmlinux";
    layout.ranges.push_back(r);
  }
  KT_ASSIGN_OR_RETURN(auto module_runs, executable_runs(walker, kModulesStart, kModulesEnd));
  label_module_area(module_runs, symbols, &layout.ranges);
  auto release = find_kernel_release(walker, layout, symbols);
  if (release) layout.release = *release;
  return layout;
}

}  // namespace kt
