#include "kthost/sideband/events.h"

#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kthost/common/strings.h"
#include "kthost_shared.h"
#include "ktproto.h"

namespace kt {

std::optional<uint64_t> GuestClock::to_tsc(uint64_t perf_time) const {
  if (!valid) return std::nullopt;
  // Inverse of perf's tsc->time: time = time_zero + (tsc * mult) >> shift,
  // split into quotient and remainder so that nothing overflows. The kernel's
  // time_zero is often "negative" (near 2^64): the subtraction wraps, as in
  // perf's own arithmetic.
  uint64_t t = perf_time - time_zero;
  uint64_t quot = t / time_mult, rem = t % time_mult;
  return (quot << time_shift) + (rem << time_shift) / time_mult;
}

namespace {
bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return !std::isdigit(static_cast<unsigned char>(s[0]));
}
bool is_lower_word(std::string_view s) {
  if (s.empty() || s.size() > 16) return false;
  for (char c : s)
    if (c < 'a' || c > 'z') return false;
  return true;
}
}  // namespace

GuardHooksEvent parse_guard_hooks(std::string_view text) {
  GuardHooksEvent out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.empty()) continue;
    size_t space = line.find(' ');
    std::string_view function = line.substr(0, space);
    std::string_view how = space == std::string_view::npos ? std::string_view{} : line.substr(space + 1);
    if (!is_identifier(function) || !is_lower_word(how) || out.hooks.size() >= 64) {
      ++out.malformed;
      continue;
    }
    out.hooks.push_back(GuardHook{std::string(function), std::string(how)});
  }
  return out;
}

namespace {
struct KindVisitor {
  const char* operator()(const HelloEvent&) const { return "hello"; }
  const char* operator()(const KsymbolEvent&) const { return "ksymbol"; }
  const char* operator()(const BpfEvent&) const { return "bpf"; }
  const char* operator()(const TextPokeEvent&) const { return "text_poke"; }
  const char* operator()(const ModuleEvent& m) const { return m.load ? "module_load" : "module_unload"; }
  const char* operator()(const LostEvent&) const { return "lost"; }
  const char* operator()(const GuardNoticeEvent&) const { return "guard_notice"; }
  const char* operator()(const HeartbeatEvent&) const { return "heartbeat"; }
  const char* operator()(const ClockEvent&) const { return "clock"; }
  const char* operator()(const StateDumpEvent&) const { return "state_dump"; }
  const char* operator()(const ErrorEvent&) const { return "error"; }
  const char* operator()(const GuardStateEvent&) const { return "guard_state"; }
  const char* operator()(const GuardHooksEvent&) const { return "guard_hooks"; }
  const char* operator()(const TaskSwitchesEvent&) const { return "task_switches"; }
};

const char* guard_state_name(uint32_t state) {
  switch (state) {
    case KTP_GUARD_ON: return "on";
    case KTP_GUARD_ABSENT: return "absent";
    case KTP_GUARD_OFF: return "off";
  }
  return "unknown";
}

const char* lost_kind_name(uint32_t kind) {
  switch (kind) {
    case KTP_LOST_PERF_RING: return "perf-ring";
    case KTP_LOST_QUEUE: return "queue";
    case KTP_LOST_GUARD_TIMEOUT: return "guard-miss";
    case KTP_LOST_MODULE_RACE: return "module-race";
    case KTP_LOST_GUARD_UNGUARDED: return "unguarded";
  }
  return "unknown";
}

std::string spaced_hex(const std::vector<uint8_t>& b) {
  std::string out;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i) out += ' ';
    out += hex_bytes(&b[i], 1);
  }
  return out;
}
}  // namespace

const char* event_kind(const EventBody& body) { return std::visit(KindVisitor{}, body); }

std::string describe(const SidebandEvent& ev) {
  std::string cpu = ev.cpu == UINT32_MAX ? "" : " cpu" + std::to_string(ev.cpu);
  std::string head = std::string(event_kind(ev.body)) + cpu + " t=" + std::to_string(ev.time);
  return std::visit(
      [&](const auto& b) -> std::string {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, HelloEvent>)
          return head + " release=" + b.release + " cpus=" + std::to_string(b.cpu_count) +
                 " clock=" + (b.clock.valid ? "tsc" : "perf-only") + " session=" + hex(b.session);
        else if constexpr (std::is_same_v<T, KsymbolEvent>)
          return head + (b.unregister ? " unregister " : " register ") + hex(b.addr) + " len=" + std::to_string(b.len) +
                 " type=" + std::to_string(b.ksym_type) + " " + b.name;
        else if constexpr (std::is_same_v<T, BpfEvent>)
          return head + (b.load ? " load" : " unload") + " id=" + std::to_string(b.id) + " tag=" + b.tag;
        else if constexpr (std::is_same_v<T, TextPokeEvent>)
          return head + " " + hex(b.addr) + " " + spaced_hex(b.old_bytes) + " -> " + spaced_hex(b.new_bytes);
        else if constexpr (std::is_same_v<T, ModuleEvent>)
          return head + " " + b.name + " text=" + hex(b.text_addr) + "+" + std::to_string(b.text_size) +
                 " core=" + hex(b.core_addr) + "+" + std::to_string(b.core_size);
        else if constexpr (std::is_same_v<T, LostEvent>)
          return head + " " + lost_kind_name(b.kind) + " count=" + std::to_string(b.count) +
                 (b.record_type ? " type=" + std::to_string(b.record_type) : "");
        else if constexpr (std::is_same_v<T, GuardNoticeEvent>)
          return head + " id=" + std::to_string(b.id) + " [" + hex(b.start) + ", " + hex(b.end) + ") kind=" +
                 kthost_text_kind_name(b.kind) + (b.ack_addr ? " ack_word=" + hex(b.ack_addr) : "");
        else if constexpr (std::is_same_v<T, HeartbeatEvent>)
          return head + " frames=" + std::to_string(b.frames_sent) + " records=" + std::to_string(b.perf_records) +
                 " pokes=" + std::to_string(b.text_pokes) + " lost=" + std::to_string(b.lost_records) +
                 " dropped=" + std::to_string(b.queue_dropped);
        else if constexpr (std::is_same_v<T, ClockEvent>)
          return head + " time_zero=" + std::to_string(b.clock.time_zero) + " mult=" + std::to_string(b.clock.time_mult) +
                 " shift=" + std::to_string(b.clock.time_shift);
        else if constexpr (std::is_same_v<T, StateDumpEvent>)
          return head + (b.reason == 2 ? " reconnect" : " start") + " symbols=" + std::to_string(b.symbols) +
                 " modules=" + std::to_string(b.modules) + " bpf=" + std::to_string(b.bpf_progs) +
                 " cpus=" + std::to_string(b.cpus);
        else if constexpr (std::is_same_v<T, GuardStateEvent>)
          return head + " " + guard_state_name(b.state) + (b.reason.empty() ? "" : ": " + b.reason);
        else if constexpr (std::is_same_v<T, GuardHooksEvent>) {
          std::string out = head;
          for (const auto& h : b.hooks) out += " " + h.function + "=" + h.how;
          if (b.malformed) out += " malformed=" + std::to_string(b.malformed);
          return out;
        } else if constexpr (std::is_same_v<T, TaskSwitchesEvent>) {
          std::string out = head + " " + std::to_string(b.switches.size()) + " switches, to tids";
          for (size_t i = 0; i < b.switches.size() && i < 8; ++i) out += " " + std::to_string(b.switches[i].next_tid);
          if (b.switches.size() > 8) out += " ...";
          return out;
        }
        else
          return head + " " + b.message;
      },
      ev.body);
}

std::string to_json(const SidebandEvent& ev) {
  nlohmann::json j = {{"kind", event_kind(ev.body)}, {"index", ev.index}, {"seq", ev.seq}, {"time", ev.time}};
  if (ev.cpu != UINT32_MAX) j["cpu"] = ev.cpu;
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, HelloEvent>) {
          j["release"] = b.release;
          j["build_id"] = b.build_id;
          j["cpu_count"] = b.cpu_count;
          j["session"] = hex(b.session);
          j["clock"] = {{"valid", b.clock.valid}, {"time_zero", b.clock.time_zero},
                        {"time_mult", b.clock.time_mult}, {"time_shift", b.clock.time_shift}};
        } else if constexpr (std::is_same_v<T, KsymbolEvent>) {
          j["addr"] = hex(b.addr);
          j["len"] = b.len;
          j["ksym_type"] = b.ksym_type;
          j["unregister"] = b.unregister;
          j["name"] = b.name;
        } else if constexpr (std::is_same_v<T, BpfEvent>) {
          j["load"] = b.load;
          j["id"] = b.id;
          j["tag"] = b.tag;
        } else if constexpr (std::is_same_v<T, TextPokeEvent>) {
          j["addr"] = hex(b.addr);
          j["old"] = hex_bytes(b.old_bytes.data(), b.old_bytes.size());
          j["new"] = hex_bytes(b.new_bytes.data(), b.new_bytes.size());
        } else if constexpr (std::is_same_v<T, ModuleEvent>) {
          j["name"] = b.name;
          j["text_addr"] = hex(b.text_addr);
          j["text_size"] = b.text_size;
          j["core_addr"] = hex(b.core_addr);
          j["core_size"] = b.core_size;
        } else if constexpr (std::is_same_v<T, LostEvent>) {
          j["lost_kind"] = lost_kind_name(b.kind);
          j["record_type"] = b.record_type;
          j["count"] = b.count;
        } else if constexpr (std::is_same_v<T, GuardNoticeEvent>) {
          j["id"] = b.id;
          j["start"] = hex(b.start);
          j["end"] = hex(b.end);
          j["guard_kind"] = b.kind;
          j["guard_kind_name"] = kthost_text_kind_name(b.kind);
          if (b.ack_addr) j["ack_addr"] = hex(b.ack_addr);
        } else if constexpr (std::is_same_v<T, HeartbeatEvent>) {
          j["frames_sent"] = b.frames_sent;
          j["perf_records"] = b.perf_records;
          j["text_pokes"] = b.text_pokes;
          j["lost_records"] = b.lost_records;
          j["queue_dropped"] = b.queue_dropped;
        } else if constexpr (std::is_same_v<T, ClockEvent>) {
          j["time_zero"] = b.clock.time_zero;
          j["time_mult"] = b.clock.time_mult;
          j["time_shift"] = b.clock.time_shift;
          j["valid"] = b.clock.valid;
        } else if constexpr (std::is_same_v<T, StateDumpEvent>) {
          j["reason"] = b.reason == 2 ? "reconnect" : "start";
          j["symbols"] = b.symbols;
          j["modules"] = b.modules;
          j["bpf_progs"] = b.bpf_progs;
          j["cpus"] = b.cpus;
        } else if constexpr (std::is_same_v<T, GuardStateEvent>) {
          j["state"] = guard_state_name(b.state);
          if (!b.reason.empty()) j["reason"] = b.reason;
        } else if constexpr (std::is_same_v<T, GuardHooksEvent>) {
          j["hooks"] = nlohmann::json::object();
          for (const auto& h : b.hooks) j["hooks"][h.function] = h.how;
          if (b.malformed) j["malformed"] = b.malformed;
        } else if constexpr (std::is_same_v<T, TaskSwitchesEvent>) {
          auto& list = j["switches"] = nlohmann::json::array();
          for (const auto& sw : b.switches) list.push_back({sw.time, sw.next_tid});
        } else {
          j["message"] = b.message;
        }
      },
      ev.body);
  return j.dump();
}

std::string kallsyms_text(const GuestState& state) {
  std::string out;
  char line[64];
  for (const auto& s : state.symbols) {
    std::snprintf(line, sizeof line, "%016llx %c ", static_cast<unsigned long long>(s.addr), s.type);
    out += line;
    out += s.name;
    if (!s.module.empty()) out += "\t[" + s.module + "]";
    out += '\n';
  }
  return out;
}

std::string modules_text(const GuestState& state) {
  std::string out;
  for (const auto& m : state.modules)
    out += m.name + " " + std::to_string(m.core_size) + " 0 - Live " + hex(m.core_addr) + "\n";
  return out;
}

}  // namespace kt
