// The observer effect (see observer.h).
#include "kthost/decode/observer.h"

#include "piece_walk.h"

#include <array>
#include <cinttypes>
#include <cstdio>
#include <string_view>

namespace kt {

namespace {

constexpr const char* kGuard = "ktguard";
constexpr const char* kChannel = "ktguest channel";
constexpr const char* kPerf = "perf sideband";
constexpr const char* kKallsyms = "kallsyms reads";
constexpr std::array<const char*, 4> kParts = {kGuard, kChannel, kPerf, kKallsyms};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Core-kernel functions that only run for ktguest's perf events.
bool perf_sideband_function(std::string_view name) {
  for (std::string_view p : {"perf_event_ksymbol", "perf_event_bpf_", "perf_event_text_poke", "perf_trace_module_load",
                             "perf_trace_module_free"})
    if (starts_with(name, p)) return true;
  for (std::string_view n : {"perf_poll", "perf_pending_irq", "perf_event_wakeup"})
    if (name == n) return true;
  return false;
}

// /proc/kallsyms's seq_file functions. s_show, s_next, s_start and s_stop are
// names several files use; kernel/kallsyms.c's are the ones laid out next to
// kallsyms_open (within kNear bytes).
class KallsymsFunctions {
 public:
  explicit KallsymsFunctions(const Symbolizer& symbols) {
    for (uint32_t id = 1; id < symbols.size(); ++id) {
      const auto& f = symbols.function(id);
      if (f.module == "kernel" && f.name == "kallsyms_open") open_ = f.start;
    }
  }
  bool contains(const FunctionInfo& f) const {
    if (f.module != "kernel") return false;
    std::string_view n = f.name;
    // Not kallsyms_expand_symbol and the like: lookups by name (BPF attach,
    // kprobes) use them too.
    if (n == "kallsyms_open" || n == "update_iter") return true;
    if (!open_ || !(n == "s_show" || n == "s_next" || n == "s_start" || n == "s_stop")) return false;
    uint64_t d = f.start > open_ ? f.start - open_ : open_ - f.start;
    return d <= kNear;
  }

 private:
  static constexpr uint64_t kNear = 16 * 1024;
  uint64_t open_ = 0;
};

const char* part_of(const FunctionInfo& f, const KallsymsFunctions& kallsyms) {
  if (f.module == "ktguard") return kGuard;
  if (f.module == "virtio_console") return kChannel;
  if (f.module == "kernel" && perf_sideband_function(f.name)) return kPerf;
  if (kallsyms.contains(f)) return kKallsyms;
  return nullptr;
}

// ktguard's ftrace wrappers are named ktg_wrap_<the end of the hooked
// function's name> (guest-kit/ktguard/guard_hooks.c): ktg_wrap_prog_pack_free
// for bpf_prog_pack_free. The wrapper's call of the original is the kernel's
// own work, which runs the same without kthost (its wait for pack_mutex
// too): not the observer's.
bool calls_the_hooked_original(const FunctionInfo& caller, const FunctionInfo& callee) {
  constexpr std::string_view kWrap = "ktg_wrap_";
  std::string_view wrapper = caller.name;
  if (caller.module != "ktguard" || !starts_with(wrapper, kWrap) || callee.module == "ktguard") return false;
  std::string_view hooked = wrapper.substr(kWrap.size());
  std::string_view name = callee.name;
  name = name.substr(0, name.find('.'));  // bpf_prog_pack_free.cold and the like
  return !hooked.empty() && name.size() >= hooked.size() && name.substr(name.size() - hooked.size()) == hooked;
}

}  // namespace

ObserverShare observer_share(const Profile& profile, const Symbolizer& symbols) {
  ObserverShare share;
  share.total = profile.insns;
  for (const char* p : kParts) share.parts[p] = 0;
  KallsymsFunctions kallsyms(symbols);
  std::map<uint32_t, const char*> parts;  // function id -> part (nullptr: none)
  auto part = [&](uint32_t id) {
    auto it = parts.find(id);
    if (it != parts.end()) return it->second;
    return parts[id] = part_of(symbols.function(id), kallsyms);
  };
  std::map<uint32_t, bool> entries;  // function id -> an event entry
  auto entry = [&](uint32_t id) {
    auto it = entries.find(id);
    return it != entries.end() ? it->second : (entries[id] = is_event_entry(symbols.function(id).name));
  };
  for (const auto& [path, n] : profile.stacks) {
    // Only the context that runs: an interrupt on top of the observer's
    // frames (a timer tick during a hold) is not the observer's doing.
    size_t from = 0;
    for (size_t i = path.size(); i-- > 0;)
      if (path[i] < symbols.size() && entry(path[i])) {
        from = i;
        break;
      }
    for (size_t i = from; i < path.size(); ++i) {
      if (path[i] < symbols.size() && i + 1 < path.size() && path[i + 1] < symbols.size() &&
          calls_the_hooked_original(symbols.function(path[i]), symbols.function(path[i + 1])))
        continue;  // the wrapper's frame does not claim the original's work
      if (const char* p = part(path[i])) {
        share.parts[p] += n;
        share.insns += n;
        break;
      }
    }
  }
  return share;
}

std::string format_observer_line(const ObserverShare& s) {
  auto pct = [&](uint64_t n) { return s.total ? 100.0 * static_cast<double>(n) / static_cast<double>(s.total) : 0.0; };
  char buf[512];
  std::snprintf(buf, sizeof buf, "observer: %.2f%% of instructions are kthost's own guest side (", s.percent());
  std::string out = buf;
  bool first = true;
  for (const char* p : kParts) {
    std::snprintf(buf, sizeof buf, "%s%s %.2f%%", first ? "" : ", ", p, pct(s.parts.at(p)));
    out += buf;
    first = false;
  }
  return out + ")";
}

}  // namespace kt
