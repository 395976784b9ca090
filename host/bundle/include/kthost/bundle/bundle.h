// The trace bundle: one directory that holds everything a decode needs
// (docs/BUNDLE.md is the format's reference).
//
//   manifest.json   versions, clocks, CPU list, and every file with the size
//                   (and CRC-32C) it had at the last flush
//   pt/cpuN.pt      raw Intel PT, one stream per CPU
//   events.jsonl    the sideband event log, one JSON object per line
//   text.kts        the text store (host/textstore)
//   kallsyms, modules   symbols at trace start (guest /proc text)
//   kcore           optional: the initial text snapshot (ELF core)
//   losses.json     loss counters
//
// Writers append and flush; a flush writes out every buffer, then replaces the
// manifest atomically. The manifest is the commit record: a reader trusts a
// file only up to the size the manifest gives, so a bundle cut short by a
// crash reads back exactly as it was at its last flush. Everything read back
// is untrusted: errors name the file and the byte offset.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kthost/bundle/pt_stream.h"
#include "kthost/common/result.h"
#include "kthost/textstore/text_store.h"

namespace kt {

inline constexpr int kBundleVersion = 1;
inline constexpr uint64_t kBundleMaxManifest = 4u << 20;

// How sideband times (guest perf clock ns) map to PT time (TSC). With
// `identity` the two are the same clock (synthetic traces, tests).
struct BundleClock {
  bool identity = true;
  uint64_t time_zero = 0;
  uint32_t time_mult = 0;
  uint16_t time_shift = 0;
  // PT time = guest TSC + pt_offset (wrapping). Under TCG the plugin stamps
  // host TSC and the guest TSC is host TSC minus a constant that kthost trace
  // estimates at the guest's HELLO (to within the channel's latency); with
  // hardware PT on KVM it is minus KVM's TSC offset.
  int64_t pt_offset = 0;
  // The guest's perf clock was not its TSC (cap_user_time_zero 0): kthost
  // trace estimated these parameters from arrival times, and PT time stands
  // in for the guest TSC. Sideband times are then off by up to the fastest
  // delivery plus a rate error of about 1e-5 (see TscOffsetEstimator).
  bool estimated = false;
  // PT time for a sideband time (modulo 2^64, as perf computes it).
  uint64_t to_pt(uint64_t perf_time) const;
};

struct BundleFileInfo {
  uint64_t size = 0;
  std::optional<uint32_t> crc32c;  // of bytes [0, size)
};

struct BundleManifest {
  int version = kBundleVersion;
  std::string writer;
  BundleClock clock;
  std::vector<uint32_t> cpus;
  uint64_t flush_seq = 0;
  bool complete = false;  // the writer closed it
  std::map<std::string, BundleFileInfo> files;  // relative path -> info
};

// Serializes / parses manifest.json. Parsing checks types, bounds, that file
// names stay inside the bundle (no "..", no absolute paths), and that every
// listed CPU has a PT file. Errors: InvalidInput naming `name`.
std::string manifest_to_json(const BundleManifest& m);
Result<BundleManifest> parse_manifest(const std::string& text, const std::string& name);

// One sideband event as the decoder needs it (parsed from events.jsonl).
struct BundleEvent {
  enum class Kind {
    KsymbolRegister, KsymbolUnregister, TextPoke, ModuleLoad, ModuleUnload, Lost, BpfLoad, BpfUnload, TaskSwitches,
    Other
  };
  Kind kind = Kind::Other;
  std::string kind_name;  // as in the file
  uint64_t time = 0;      // guest perf clock (bundle clock converts)
  uint32_t cpu = UINT32_MAX;
  uint64_t addr = 0, len = 0;  // ksymbol addr/len; module text_addr/text_size; poke addr
  uint16_t ksym_type = 0;
  std::string name;
  std::vector<uint8_t> old_bytes, new_bytes;
  uint64_t count = 0;  // lost
  std::string lost_kind;
  uint32_t bpf_id = 0;               // BPF program load/unload: the program's id
  std::array<uint8_t, 8> bpf_tag{};  // and its tag (after the ksymbols of its functions)
  // task_switches: (guest perf time, tid switched to), in order, at most kMaxTaskSwitchesPerEvent.
  std::vector<std::pair<uint64_t, uint32_t>> switches;
  static constexpr size_t kMaxTaskSwitchesPerEvent = 512;  // KTP_MAX_SWITCH_WORDS / 2
};
// Parses events.jsonl text; errors name `name`, the line and the byte offset.
Result<std::vector<BundleEvent>> parse_events_jsonl(const std::string& text, const std::string& name);
// The JSON line for an event, in the format `kthost trace` writes (for tests
// and synthetic bundles).
std::string event_to_json(const BundleEvent& e);

struct Bundle {
  std::string dir;
  BundleManifest manifest;
  PtStreams pt;  // cpu -> stream, cut at the manifest size: mapped from its file (see pt_stream.h)
  std::vector<BundleEvent> events;
  TextStoreContents text;
  std::string kallsyms, modules;
  std::string kcore_path;  // empty when the bundle has no kcore
  std::map<std::string, uint64_t> losses;
  uint64_t ignored_bytes = 0;  // bytes past the last flush (a writer cut short)
};

struct BundleReadOptions {
  bool check_crc = true;
  // Called on each PT stream as it is read; an error stops the read. The
  // decoder's check_pt_packets (kthost/decode/pt_packet_check.h) walks every
  // packet with libipt; kt_bundle itself knows nothing of PT packets.
  std::function<Status(const std::string& name, const PtStream& pt)> check_pt;
  uint64_t max_pt_bytes = uint64_t{16} << 30;
};
// Reads and validates a whole bundle.
// Errors: Io (a file cannot be read), InvalidInput (malformed; the message
// names the file and the offset), LimitExceeded.
Result<Bundle> read_bundle(const std::string& dir, const BundleReadOptions& options = {});

// Appending writer. Not thread-safe; one owner (the trace loop).
class BundleWriter {
 public:
  // Creates DIR (and DIR/pt) and writes a first manifest.
  static Result<std::unique_ptr<BundleWriter>> create(const std::string& dir, const std::vector<uint32_t>& cpus,
                                                      const BundleClock& clock);
  ~BundleWriter();

  // Errors: InvalidArgument (unknown cpu), Io.
  Status append_pt(uint32_t cpu, const void* data, size_t len);
  Status append_event_json(const std::string& line);  // one JSON object, no newline
  Status append_text(const TextRecord& record);
  // Whole files written once (atomically): kallsyms, modules, kcore.
  Status write_whole_file(const std::string& name, const std::string& data);
  void set_loss(const std::string& name, uint64_t count) { losses_[name] = count; }
  // The clock is often known only once the guest said hello; the next flush
  // writes it.
  void set_clock(const BundleClock& clock) { manifest_.clock = clock; }
  // Everything appended so far becomes durable and visible to readers.
  Status flush();
  // flush() with complete=true.
  Status close();
  const std::string& dir() const { return dir_; }

 private:
  struct Stream;
  BundleWriter() = default;
  Result<Stream*> stream(const std::string& name);
  std::string dir_;
  BundleManifest manifest_;
  std::map<std::string, std::unique_ptr<Stream>> streams_;
  std::unique_ptr<TextStoreWriter> text_;
  std::map<std::string, uint64_t> losses_;
};

}  // namespace kt
