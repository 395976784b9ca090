// Symbolizer: kallsyms + ksymbol events + modules (see symbolizer.h).
#include "kthost/decode/symbolizer.h"

#include <algorithm>
#include <map>

#include "dwarf_lines.h"
#include "kthost/introspect/guest_symbols.h"

namespace kt {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Of symbols at one address, a higher rank names the address: markers of
// sections and arrays rank lowest; among the rest, the later one wins.
int alias_rank(const KernelSymbol& s) {
  const std::string& n = s.name;
  const bool marker = n.rfind("__start_", 0) == 0 || n.rfind("__stop_", 0) == 0 || n == "_stext" || n == "_etext" ||
                      n == "_text" || (n.rfind("__", 0) == 0 && (ends_with(n, "_start") || ends_with(n, "_end"))) ||
                      ends_with(n, "_array");
  return marker ? 0 : 1;
}

}  // namespace

Symbolizer::Symbolizer() {
  FunctionInfo unknown;
  unknown.name = "[unknown]";
  unknown.module = "?";
  functions_.push_back(unknown);
  dynamic_.push_back(false);
}
Symbolizer::~Symbolizer() = default;
Symbolizer::Symbolizer(Symbolizer&&) noexcept = default;
Symbolizer& Symbolizer::operator=(Symbolizer&&) noexcept = default;

Status Symbolizer::add_kallsyms(const std::string& kallsyms_text, const std::string& modules_text) {
  GuestSymbols gs;
  if (!kallsyms_text.empty()) KT_TRY(gs.parse_kallsyms(kallsyms_text));
  if (!modules_text.empty()) KT_TRY(gs.parse_modules(modules_text));
  for (const auto& m : gs.modules) add_module_range(m.name, m.base, m.size);
  // The module list is current; the guest's kallsyms may be older.
  auto module_at = [&gs](uint64_t address) -> const std::string* {
    for (const auto& m : gs.modules)
      if (address >= m.base && address - m.base < m.size) return &m.name;
    return nullptr;
  };
  std::map<std::string, uint64_t> symbols_per_module;
  for (const auto& m : gs.modules) symbols_per_module[m.name] = 0;
  std::vector<const KernelSymbol*> text;
  for (const auto& s : gs.symbols) {
    if (!(s.type == 't' || s.type == 'T' || s.type == 'w' || s.type == 'W')) continue;
    if (!s.module.empty() && !gs.modules.empty()) {
      const std::string* here = module_at(s.address);
      auto listed = symbols_per_module.find(s.module);
      if (listed == symbols_per_module.end() || (here && *here != s.module)) {
        ++stale_.dropped;
        continue;
      }
      ++listed->second;
    }
    text.push_back(&s);
  }
  if (!gs.symbols.empty())
    for (const auto& [name, n] : symbols_per_module)
      if (n == 0) stale_.modules_without_symbols.push_back(name);
  for (const KernelSymbol* s : text)
    if (s->name == "_stext") stext_ = s->address;
  for (size_t i = 0; i < text.size(); ++i) {
    // Aliases at one address: the best name names it (a section or array
    // marker such as __static_call_text_end loses to the function itself).
    while (i + 1 < text.size() && text[i + 1]->address == text[i]->address) {
      if (alias_rank(*text[i]) > alias_rank(*text[i + 1])) std::swap(text[i], text[i + 1]);
      ++i;
    }
    const auto& s = *text[i];
    FunctionInfo f;
    f.start = s.address;
    f.end = i + 1 < text.size() ? text[i + 1]->address : s.address + 4096;
    // A module's last symbol ends with the module, not at the next module's
    // first; the core kernel's last one does not run into module space.
    if (!s.module.empty()) {
      for (const auto& m : gs.modules)
        if (s.address >= m.base && s.address - m.base < m.size) f.end = std::min(f.end, m.base + m.size);
    } else if (i + 1 < text.size() && !text[i + 1]->module.empty()) {
      f.end = std::min(f.end, s.address + 4096);
    }
    if (f.end <= f.start) continue;
    f.name = s.name;
    f.module = s.module.empty() ? "kernel" : s.module;
    functions_.push_back(std::move(f));
    dynamic_.push_back(false);
  }
  return ok_status();
}

void Symbolizer::add_dynamic(FunctionInfo info) {
  if (info.end <= info.start) info.end = info.start + 1;
  functions_.push_back(std::move(info));
  dynamic_.push_back(true);
}

void Symbolizer::add_module_range(const std::string& name, uint64_t start, uint64_t size) {
  if (size == 0 || start + size < start) return;
  modules_.push_back({name, start, start + size});
}

void Symbolizer::finalize() {
  static_order_.clear();
  dynamic_order_.clear();
  for (uint32_t i = 1; i < functions_.size(); ++i)
    if (i != base_unknown_) (dynamic_[i] ? dynamic_order_ : static_order_).push_back(i);
  auto by_start = [&](uint32_t a, uint32_t b) {
    if (functions_[a].start != functions_[b].start) return functions_[a].start < functions_[b].start;
    return functions_[a].begin < functions_[b].begin;
  };
  std::stable_sort(static_order_.begin(), static_order_.end(), by_start);
  std::stable_sort(dynamic_order_.begin(), dynamic_order_.end(), by_start);
  std::sort(modules_.begin(), modules_.end(), [](const ModuleRange& a, const ModuleRange& b) { return a.start < b.start; });
  // Addresses in a module without a symbol still count for that module.
  module_unknown_.clear();
  for (const auto& m : modules_) {
    FunctionInfo f;
    f.start = m.start;
    f.end = m.end;
    f.name = "[unknown]";
    f.module = m.name;
    functions_.push_back(std::move(f));
    dynamic_.push_back(false);
    module_unknown_.push_back(static_cast<uint32_t>(functions_.size() - 1));
  }
  if (base_unknown_ == kUnknown) {
    FunctionInfo f;
    f.name = "[base unknown]";
    f.module = "kernel";
    functions_.push_back(std::move(f));
    dynamic_.push_back(false);
    base_unknown_ = static_cast<uint32_t>(functions_.size() - 1);
  }
}

uint32_t Symbolizer::lookup(uint64_t ip, uint64_t time) const {
  // Dynamic symbols first: they are exact (size and lifetime known).
  auto it = std::upper_bound(dynamic_order_.begin(), dynamic_order_.end(), ip,
                             [&](uint64_t x, uint32_t id) { return x < functions_[id].start; });
  uint32_t fallback = kUnknown;
  for (int steps = 0; it != dynamic_order_.begin() && steps < 256; ++steps) {
    --it;
    const auto& f = functions_[*it];
    if (ip >= f.end) continue;
    if (time >= f.begin && time < f.end_time) return *it;
    // Outside its lifetime: the closest one still names the address best.
    if (fallback == kUnknown || (time < f.begin && functions_[fallback].begin > f.begin)) fallback = *it;
  }
  auto st = std::upper_bound(static_order_.begin(), static_order_.end(), ip,
                             [&](uint64_t x, uint32_t id) { return x < functions_[id].start; });
  if (st != static_order_.begin()) {
    --st;
    if (ip < functions_[*st].end) return *st;
  }
  if (fallback != kUnknown) return fallback;
  auto m = std::upper_bound(modules_.begin(), modules_.end(), ip,
                            [](uint64_t x, const ModuleRange& r) { return x < r.start; });
  if (m != modules_.begin()) {
    --m;
    if (ip < m->end) return module_unknown_[static_cast<size_t>(m - modules_.begin())];
  }
  return kUnknown;
}

std::string Symbolizer::module_of(uint64_t ip) const {
  for (const auto& m : modules_)
    if (ip >= m.start && ip < m.end) return m.name;
  return "";
}

Result<Symbolizer> Symbolizer::from_bundle(const Bundle& bundle) {
  Symbolizer s;
  KT_TRY(s.add_kallsyms(bundle.kallsyms, bundle.modules));
  const BundleClock& clock = bundle.manifest.clock;
  // A ksymbol register opens a life, the unregister at the same address closes it.
  std::vector<size_t> open;  // indices into functions_
  for (const auto& e : bundle.events) {
    uint64_t t = clock.to_pt(e.time);
    if (e.kind == BundleEvent::Kind::KsymbolRegister) {
      FunctionInfo f;
      f.start = e.addr;
      f.end = e.addr + std::max<uint64_t>(e.len, 1);
      f.begin = t;
      f.name = e.name;
      f.module = e.ksym_type == 1 ? "bpf" : "ool";
      s.add_dynamic(std::move(f));
      open.push_back(s.functions_.size() - 1);
    } else if (e.kind == BundleEvent::Kind::KsymbolUnregister) {
      for (auto it = open.rbegin(); it != open.rend(); ++it) {
        auto& f = s.functions_[*it];
        if (f.start == e.addr && f.end_time == UINT64_MAX) {
          f.end_time = t;
          break;
        }
      }
    } else if (e.kind == BundleEvent::Kind::ModuleLoad) {
      s.add_module_range(e.name, e.addr, e.len);
    }
  }
  s.finalize();
  return s;
}

Status Symbolizer::load_dwarf(const std::string& vmlinux) {
  auto d = DwarfLines::open(vmlinux, stext_);
  if (!d) return d.take_error();
  dwarf_ = std::move(*d);
  return ok_status();
}

std::optional<std::string> Symbolizer::source_line(uint64_t ip) const {
  if (!dwarf_) return std::nullopt;
  return dwarf_->line(ip);
}

}  // namespace kt
