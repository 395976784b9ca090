// Sideband events as the host keeps them: owning copies of what the guest
// sent (guest-kit/proto/PROTOCOL.md), validated by the codec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kt {

struct GuestClock {
  uint64_t time_zero = 0;
  uint32_t time_mult = 0;
  uint16_t time_shift = 0;
  bool valid = false;  // cap_user_time_zero: perf time converts to guest TSC
  // Guest TSC for a perf clock value, as perf documents it; nullopt when !valid.
  std::optional<uint64_t> to_tsc(uint64_t perf_time) const;
};

struct HelloEvent {
  uint16_t proto_minor = 0;
  uint32_t cpu_count = 0;
  uint64_t boot_time_ns = 0;
  uint64_t session = 0;
  GuestClock clock;
  std::string release, build_id;
};
struct KsymbolEvent {
  uint64_t addr = 0;
  uint32_t len = 0;
  uint16_t ksym_type = 0;  // 1 BPF, 2 OOL (trampolines and other out-of-line code)
  bool unregister = false;
  std::string name;
};
struct BpfEvent {
  bool load = true;  // PROG_LOAD, else PROG_UNLOAD
  uint32_t id = 0;
  std::string tag;   // 16 hex digits
};
struct TextPokeEvent {
  uint64_t addr = 0;
  std::vector<uint8_t> old_bytes, new_bytes;
};
struct ModuleEvent {
  bool load = true;
  std::string name;
  uint64_t text_addr = 0, text_size = 0, core_addr = 0, core_size = 0;
};
struct LostEvent {
  uint32_t kind = 0;  // ktp_lost_kind
  uint32_t record_type = 0;
  uint64_t count = 0;
};
struct GuardNoticeEvent {
  uint64_t id = 0, start = 0, end = 0;
  uint32_t kind = 0;
  uint64_t ack_addr = 0;  // guest-physical ack word (0: none); see PROTOCOL.md
};
struct HeartbeatEvent {
  uint64_t frames_sent = 0, perf_records = 0, text_pokes = 0, lost_records = 0, queue_dropped = 0;
};
struct ClockEvent {
  GuestClock clock;
};
struct StateDumpEvent {  // one complete STATE_BEGIN..STATE_END
  uint32_t reason = 0;
  size_t symbols = 0, modules = 0, bpf_progs = 0, cpus = 0;
};
struct ErrorEvent {
  std::string message;
};
struct GuardStateEvent {  // whether the guest's frees of kernel text are held
  uint32_t state = 0;     // enum ktp_guard_mode: 1 on, 2 absent, 3 off
  std::string reason;
};

// TASK_SWITCHES: switches away from a task on one CPU, in order (perf
// context-switch out-records: made just before __switch_to_asm runs).
struct TaskSwitch {
  uint64_t time = 0;      // guest perf clock (ns)
  uint32_t next_tid = 0;  // the task switched to (0: idle)
};
struct TaskSwitchesEvent {
  std::vector<TaskSwitch> switches;
};

// How ktguard attached one kernel path that frees text (GUARD_HOOKS).
struct GuardHook {
  std::string function;  // the kernel function hooked, e.g. bpf_prog_pack_free
  std::string how;       // ftrace, kprobe, notifier or none
  bool held() const { return how == "ftrace" || how == "kprobe" || how == "notifier"; }
};
struct GuardHooksEvent {
  std::vector<GuardHook> hooks;
  size_t malformed = 0;  // lines that were not "<function> <how>"
};
// Parses ktguard's hooks text as GUARD_HOOKS carries it (untrusted: at most
// KTP_MAX_STRING bytes; a line that is not "<function> <how>" with a C
// identifier and a lower-case word is counted as malformed and skipped).
GuardHooksEvent parse_guard_hooks(std::string_view text);

using EventBody = std::variant<HelloEvent, KsymbolEvent, BpfEvent, TextPokeEvent, ModuleEvent, LostEvent,
                               GuardNoticeEvent, HeartbeatEvent, ClockEvent, StateDumpEvent, ErrorEvent,
                               GuardStateEvent, GuardHooksEvent, TaskSwitchesEvent>;

struct SidebandEvent {
  uint64_t index = 0;  // position in the host's log
  uint64_t seq = 0;    // the guest's frame sequence number
  uint64_t time = 0;   // guest perf clock (ns); 0 when the message has none
  uint32_t cpu = UINT32_MAX;
  EventBody body;
};

const char* event_kind(const EventBody& body);
// One readable line, e.g. "text_poke cpu1 0xffffffff81234567 e8 12 34 56 78 -> 0f 1f 44 00 00".
std::string describe(const SidebandEvent& event);
// One JSON object (no newline).
std::string to_json(const SidebandEvent& event);

// What the latest state dump said, updated by later events.
struct GuestSymbolRecord {
  uint64_t addr = 0;
  char type = '?';
  std::string name, module;
};
struct GuestModuleRecord {
  std::string name;
  uint64_t text_addr = 0, text_size = 0, core_addr = 0, core_size = 0;
};
struct GuestBpfRecord {
  uint32_t id = 0, prog_type = 0;
  std::string tag, name;
  uint64_t jited_addr = 0;
  uint32_t jited_len = 0;
};
struct GuestState {
  std::vector<GuestSymbolRecord> symbols;
  std::vector<GuestModuleRecord> modules;
  std::vector<GuestBpfRecord> bpf_progs;
  std::vector<uint32_t> cpus;
  bool complete = false;  // STATE_END seen
};

// The state dump as the guest's /proc/kallsyms and /proc/modules would read
// (what a bundle and perf's kcore_dir keep beside kcore).
std::string kallsyms_text(const GuestState& state);
std::string modules_text(const GuestState& state);

}  // namespace kt
