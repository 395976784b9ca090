// RAM layout discovery from QEMU's flat memory view.
#include <sstream>

#include "kthost/common/strings.h"
#include "kthost/introspect/backends.h"

namespace kt {

namespace {

struct FlatRange {
  uint64_t start = 0, last = 0, offset = 0;
  std::string type, name;
};

// "  0000000000100000-000000007fffffff (prio 0, ram): ram0 @0000000000100000"
bool parse_flat_line(std::string_view line, FlatRange* out) {
  line = trim(line);
  size_t dash = line.find('-');
  size_t paren = line.find(" (");
  size_t close = line.find("): ");
  if (dash == std::string_view::npos || paren == std::string_view::npos || close == std::string_view::npos ||
      !(dash < paren && paren < close))
    return false;
  auto start = parse_u64(line.substr(0, dash), 16);
  auto last = parse_u64(line.substr(dash + 1, paren - dash - 1), 16);
  if (!start || !last || *last < *start) return false;
  std::string_view attrs = line.substr(paren + 2, close - paren - 2);  // "prio 0, ram"
  size_t comma = attrs.find(", ");
  if (comma == std::string_view::npos) return false;
  std::string_view rest = line.substr(close + 3);
  uint64_t offset = 0;
  size_t at = rest.rfind(" @");
  std::string_view name = rest;
  if (at != std::string_view::npos) {
    auto off = parse_u64(rest.substr(at + 2), 16);
    if (!off) return false;
    offset = *off;
    name = rest.substr(0, at);
  }
  out->start = *start;
  out->last = *last;
  out->offset = offset;
  out->type = std::string(attrs.substr(comma + 2));
  out->name = std::string(trim(name));
  return true;
}

}  // namespace

Result<PhysMap> parse_mtree_ram(const std::string& mtree_text, std::string* ram_name) {
  // Only the first flat view: every CPU address space shows the same RAM.
  std::vector<FlatRange> ranges;
  std::istringstream in(mtree_text);
  std::string line;
  int views = 0;
  while (std::getline(in, line)) {
    if (starts_with(trim(line), "FlatView")) {
      if (++views > 1) break;
      continue;
    }
    FlatRange r;
    if (parse_flat_line(line, &r)) ranges.push_back(r);
    if (ranges.size() > 100000) return Error(ErrorCode::LimitExceeded, "info mtree: too many ranges");
  }
  std::string name;
  for (const auto& r : ranges)
    if (r.start <= 0x100000 && 0x100000 <= r.last && r.type == "ram") name = r.name;
  if (name.empty()) return Error(ErrorCode::InvalidInput, "info mtree: no RAM at guest-physical 1 MiB");
  std::vector<RamRegion> regions;
  for (const auto& r : ranges) {
    if (r.name != name || (r.type != "ram" && r.type != "rom")) continue;
    uint64_t size = r.last - r.start + 1;
    if (!regions.empty()) {
      RamRegion& prev = regions.back();
      if (prev.gpa + prev.size == r.start && prev.backing_offset + prev.size == r.offset) {
        prev.size += size;
        continue;
      }
    }
    regions.push_back({r.start, size, r.offset});
  }
  if (ram_name) *ram_name = name;
  return PhysMap(std::move(regions));
}

Result<PhysMap> discover_phys_map(Monitor& monitor, const VmDescription& vm) {
  auto text = monitor.hmp("info mtree -f");
  if (text) {
    auto map = parse_mtree_ram(*text);
    if (map && map->ram_size() <= vm.ram_size && map->ram_size() >= vm.ram_size / 2) return map;
  }
  // The monitor answer was unusable; QEMU's documented default split is exact
  // unless the user overrode max-ram-below-4g.
  KT_ASSIGN_OR_RETURN(uint64_t below, PhysMap::below_4g_for(vm.machine, vm.ram_size));
  return PhysMap::split_at(vm.ram_size, below);
}

}  // namespace kt
