// Source lines from a vmlinux's DWARF through elfutils' libdw. The guest runs
// at a KASLR offset: the bias is runtime _stext minus the file's _stext.
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "dwarf_lines.h"
#include "kthost/common/result.h"

namespace kt {

struct DwarfLines::Impl {
  int fd = -1;
  Dwarf* dwarf = nullptr;
  int64_t bias = 0;
  mutable std::mutex lock;  // libdw's lazy loading is not thread-safe
  // Without .debug_aranges (clang does not emit it by default) dwarf_addrdie
  // finds nothing: then every CU's address ranges, built once, sorted.
  struct CuRange {
    Dwarf_Addr low, high;
    Dwarf_Off offset;
  };
  mutable std::vector<CuRange> ranges;
  mutable bool ranges_built = false;
  void build_ranges() const {
    ranges_built = true;
    Dwarf_Off off = 0, next = 0;
    size_t header = 0;
    while (dwarf_nextcu(dwarf, off, &next, &header, nullptr, nullptr, nullptr) == 0) {
      Dwarf_Die die;
      if (dwarf_offdie(dwarf, off + header, &die)) {
        Dwarf_Addr base = 0, low = 0, high = 0;
        ptrdiff_t it = 0;
        while ((it = dwarf_ranges(&die, it, &base, &low, &high)) > 0)
          if (high > low) ranges.push_back({low, high, off + header});
      }
      off = next;
    }
    std::sort(ranges.begin(), ranges.end(), [](const CuRange& a, const CuRange& b) { return a.low < b.low; });
  }
  bool cu_for(Dwarf_Addr addr, Dwarf_Die* cu) const {
    if (dwarf_addrdie(dwarf, addr, cu)) return true;
    if (!ranges_built) build_ranges();
    auto it = std::upper_bound(ranges.begin(), ranges.end(), addr,
                               [](Dwarf_Addr a, const CuRange& r) { return a < r.low; });
    for (int steps = 0; it != ranges.begin() && steps < 64; ++steps) {  // CUs rarely overlap: a short walk
      --it;
      if (addr >= it->low && addr < it->high) return dwarf_offdie(dwarf, it->offset, cu) != nullptr;
    }
    return false;
  }
};

DwarfLines::~DwarfLines() {
  if (impl) {
    if (impl->dwarf) dwarf_end(impl->dwarf);
    if (impl->fd >= 0) ::close(impl->fd);
  }
}

namespace {
// The file's _stext from its ELF symbol table (0 when absent).
uint64_t file_stext(Elf* elf) {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || sh.sh_entsize == 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) continue;
    size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym)) break;
      const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (name && std::strcmp(name, "_stext") == 0) return sym.st_value;
    }
  }
  return 0;
}
}  // namespace

Result<std::unique_ptr<DwarfLines>> DwarfLines::open(const std::string& path, uint64_t runtime_stext) {
  auto d = std::make_unique<DwarfLines>();
  d->impl = std::make_unique<Impl>();
  d->impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (d->impl->fd < 0) return io_error("open " + path, errno);
  d->impl->dwarf = dwarf_begin(d->impl->fd, DWARF_C_READ);
  if (!d->impl->dwarf)
    return Error(ErrorCode::InvalidInput, path + ": no DWARF debug information (" + dwarf_errmsg(-1) + ")");
  if (runtime_stext) {
    Elf* elf = dwarf_getelf(d->impl->dwarf);
    uint64_t fs = elf ? file_stext(elf) : 0;
    if (fs) d->impl->bias = static_cast<int64_t>(runtime_stext - fs);
  }
  return d;
}

std::optional<std::string> DwarfLines::line(uint64_t runtime_ip) const {
  std::lock_guard<std::mutex> g(impl->lock);
  Dwarf_Addr addr = runtime_ip - static_cast<uint64_t>(impl->bias);
  Dwarf_Die cu;
  if (!impl->cu_for(addr, &cu)) return std::nullopt;
  Dwarf_Line* l = dwarf_getsrc_die(&cu, addr);
  if (!l) return std::nullopt;
  int lineno = 0;
  dwarf_lineno(l, &lineno);
  const char* file = dwarf_linesrc(l, nullptr, nullptr);
  if (!file) return std::nullopt;
  return std::string(file) + ":" + std::to_string(lineno);
}

}  // namespace kt
