#include "kthost/introspect/guest_symbols.h"

#include <algorithm>

#include "kthost/common/strings.h"

namespace kt {

namespace {

// Splits on runs of spaces and tabs.
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > GuestSymbols::kMaxNameLength) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

}  // namespace

Status GuestSymbols::parse_kallsyms(const std::string& text) {
  symbols.clear();
  for (std::string_view line : split(text, '\n')) {
    if (trim(line).empty()) continue;
    auto f = fields(line);
    // "ffffffff81000000 T _stext" or "ffffffffc0a00000 t foo\t[dummy]"
    if (f.size() < 3 || f.size() > 4 || f[1].size() != 1) {
      ++skipped_lines;
      continue;
    }
    auto addr = parse_u64(f[0], 16);
    if (!addr || !valid_name(f[2])) {
      ++skipped_lines;
      continue;
    }
    KernelSymbol sym;
    sym.address = *addr;
    sym.type = f[1][0];
    sym.name = std::string(f[2]);
    if (f.size() == 4) {
      std::string_view mod = f[3];
      if (mod.size() < 3 || mod.front() != '[' || mod.back() != ']' || !valid_name(mod.substr(1, mod.size() - 2))) {
        ++skipped_lines;
        continue;
      }
      sym.module = std::string(mod.substr(1, mod.size() - 2));
    }
    if (symbols.size() >= kMaxSymbols)
      return Error(ErrorCode::LimitExceeded, "kallsyms: more than " + std::to_string(kMaxSymbols) + " symbols");
    symbols.push_back(std::move(sym));
  }
  std::stable_sort(symbols.begin(), symbols.end(),
                   [](const KernelSymbol& a, const KernelSymbol& b) { return a.address < b.address; });
  return {};
}

Status GuestSymbols::parse_modules(const std::string& text) {
  modules.clear();
  for (std::string_view line : split(text, '\n')) {
    if (trim(line).empty()) continue;
    auto f = fields(line);
    // "dummy 16384 0 - Live 0xffffffffc0a00000 (E)"
    if (f.size() < 6 || !valid_name(f[0])) {
      ++skipped_lines;
      continue;
    }
    auto size = parse_u64(f[1], 10);
    auto base = parse_u64(f[5], 0);
    if (!size || !base || *size > (1ull << 32) || *base + *size < *base) {
      ++skipped_lines;
      continue;
    }
    if (modules.size() >= 65536) return Error(ErrorCode::LimitExceeded, "modules: more than 65536 modules");
    modules.push_back({std::string(f[0]), *base, *size});
  }
  std::sort(modules.begin(), modules.end(), [](const GuestModule& a, const GuestModule& b) { return a.base < b.base; });
  return {};
}

const KernelSymbol* GuestSymbols::find(const std::string& name) const {
  for (const auto& s : symbols)
    if (s.name == name) return &s;
  return nullptr;
}

const KernelSymbol* GuestSymbols::symbol_at(uint64_t address) const {
  auto it = std::upper_bound(symbols.begin(), symbols.end(), address,
                             [](uint64_t a, const KernelSymbol& s) { return a < s.address; });
  if (it == symbols.begin()) return nullptr;
  return &*std::prev(it);
}

}  // namespace kt
