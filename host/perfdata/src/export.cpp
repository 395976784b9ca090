// export_perf_data: a bundle as `perf record --kcore` would have written it.
#include "kthost/perfdata/export.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "kcore_text.h"
#include "kthost/decode/decoder.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/perfdata/perf_data.h"
#include "kthost_shared.h"

namespace kt {
namespace {

Status make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return io_error("mkdir " + path, errno);
  return ok_status();
}

constexpr uint32_t kPmuType = 8;         // any number: the attr and AUXTRACE_INFO agree on it
constexpr uint64_t kTscBit = 1u << 10;    // the bits intel_pt's format files give on hardware
constexpr uint64_t kNoRetCompBit = 1u << 11;
constexpr uint64_t kMtcBit = 1u << 9, kMtcFreqBits = 0xfu << 14, kCycBit = 1u << 1;
constexpr uint64_t kIdBase = 1;           // sample id of CPU n: kIdBase + n
constexpr size_t kMaxPokeBytes = 60000;   // a TEXT_POKE's bytes (the record is at most 64 KiB)
constexpr uint64_t kLoadSlackNs = 5'000'000;
constexpr uint64_t kMaxAuxFlagRecords = 4096;  // PERF_RECORD_AUX per vCPU and flag; more are counted in a note

// perf's TSC to time: time_zero + (tsc >> shift) * mult + ((tsc & mask) * mult >> shift).
uint64_t tsc_to_ns_part(uint64_t tsc, uint32_t mult, uint16_t shift) {
  uint64_t quot = tsc >> shift, rem = tsc & ((uint64_t{1} << shift) - 1);
  return quot * mult + ((rem * mult) >> shift);
}

// /proc/modules lines: "name size refcount deps state address".
struct ModuleLine {
  std::string name;
  uint64_t size = 0, start = 0;
};
std::vector<ModuleLine> parse_modules_text(const std::string& text) {
  std::vector<ModuleLine> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::vector<std::string> f;
    size_t i = pos;
    while (i < eol) {
      size_t sp = text.find(' ', i);
      if (sp == std::string::npos || sp > eol) sp = eol;
      if (sp > i) f.push_back(text.substr(i, sp - i));
      i = sp + 1;
    }
    pos = eol + 1;
    if (f.size() < 6 || f[0].size() > 64) continue;
    auto size = parse_u64(f[1], 10), start = parse_u64(f[5], 16);
    if (!size || !start || *size == 0 || *size > (uint64_t{1} << 30)) continue;
    out.push_back({f[0], *size, *start});
  }
  return out;
}

// perf gives ksymbols with these names no text source (its "BPF image"
// dsos read nothing), so the export sends their text the way it sends
// module text, and names them in kallsyms.
bool is_bpf_image_name(const std::string& name) {
  return name.rfind("bpf_trampoline_", 0) == 0 || name.rfind("bpf_dispatcher_", 0) == 0;
}

// The kernel's _text, _stext and _etext from kallsyms text.
struct KernelSymbols {
  uint64_t text = 0, stext = 0, etext = 0;
};
KernelSymbols find_kernel_symbols(const std::string& kallsyms) {
  KernelSymbols k;
  size_t pos = 0;
  while (pos < kallsyms.size()) {
    size_t eol = kallsyms.find('\n', pos);
    if (eol == std::string::npos) eol = kallsyms.size();
    std::string line = kallsyms.substr(pos, eol - pos);
    pos = eol + 1;
    size_t a = line.find(' '), b = line.find(' ', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string name = line.substr(b + 1);
    if (name != "_text" && name != "_stext" && name != "_etext") continue;
    auto v = parse_u64(line.substr(0, a), 16);
    if (!v) continue;
    (name == "_text" ? k.text : name == "_stext" ? k.stext : k.etext) = *v;
  }
  return k;
}

// "aux_truncated_cpu3" -> (PERF_AUX_FLAG_TRUNCATED, 3): the hardware AUX
// ring's per-vCPU counters, which perf.data holds as PERF_RECORD_AUX flags.
std::optional<std::pair<uint64_t, uint32_t>> aux_loss_key(const std::string& name) {
  static const std::pair<const char*, uint64_t> kinds[] = {{"aux_truncated_cpu", PERF_AUX_FLAG_TRUNCATED},
                                                           {"aux_partial_cpu", PERF_AUX_FLAG_PARTIAL},
                                                           {"aux_collision_cpu", PERF_AUX_FLAG_COLLISION}};
  for (const auto& [prefix, flag] : kinds) {
    std::string p(prefix);
    if (name.rfind(p, 0) != 0) continue;
    auto cpu = parse_u64(name.substr(p.size()), 10);
    if (!cpu || *cpu > 65535) return std::nullopt;
    return std::make_pair(flag, static_cast<uint32_t>(*cpu));
  }
  return std::nullopt;
}

class Exporter {
 public:
  Exporter(const Bundle& b, const PerfExportOptions& o) : b_(b), o_(o) {}
  Result<PerfExportSummary> run();

 private:
  void find_bpf_programs();
  Status build_kcore();
  Status write_records();
  Status add(perf::RecordBytes& r, uint64_t time, uint32_t cpu);
  Status add_poke(uint64_t addr, const std::vector<uint8_t>& old_bytes, const std::vector<uint8_t>& new_bytes,
                  uint64_t time, uint32_t cpu);
  Status add_load_pokes(uint64_t addr, const std::vector<uint8_t>& text, uint64_t time);
  const TextRecord* text_at_load(const BundleEvent& e) const;
  bool in_ksymbol_range(uint64_t start, uint64_t end) const;
  uint64_t begin_time(uint64_t start, uint64_t end, uint64_t time) const;
  uint64_t cpu_id(uint32_t cpu) const { return kIdBase + (cpu < 4096 ? cpu : 0); }

  const Bundle& b_;
  const PerfExportOptions& o_;
  PerfExportSummary s_;
  KcoreText kcore_;
  std::optional<perf::PerfFileWriter> w_;
  std::vector<std::pair<uint64_t, uint64_t>> ksymbol_ranges_;
  // Single-function BPF programs, sent as perf record sends them: a BPF
  // KSYMBOL, a BPF_EVENT and their JIT bytes in the BPF_PROG_INFO feature.
  std::vector<perf::BpfProgInfo> progs_;
  std::map<const BundleEvent*, size_t> prog_ksymbols_;  // register or unregister -> progs_ index
  std::map<uint32_t, size_t> prog_ids_;                 // program id -> progs_ index
  std::map<uint32_t, uint64_t> prog_begin_;              // program id -> its KSYMBOL's time
  struct End {
    uint64_t start, end, time;
  };
  std::vector<End> ends_;  // where text stopped: unregisters, unloads, copies saved before a free
};

// New text runs at once, and the bundle's sideband and PT clocks agree only
// to within the alignment's error (under TCG, the channel's latency). So
// what brings text (a KSYMBOL, a BPF_EVENT, a load's TEXT_POKEs) is dated a
// little before its event, as kthost's own image dates a load copy, but never
// before the end of what was at that address before.
uint64_t Exporter::begin_time(uint64_t start, uint64_t end, uint64_t time) const {
  uint64_t begin = time > kLoadSlackNs ? time - kLoadSlackNs : 0;
  for (const auto& e : ends_)
    if (e.start < end && start < e.end && e.time <= time && e.time >= begin) begin = std::min(time, e.time + 1);
  return begin;
}

// A BPF program's load event follows the ksymbol registrations of its
// functions; its unload follows their unregistrations. A program with one
// function named for its tag ("bpf_prog_<tag>_<name>") whose text was saved
// becomes a BPF_PROG_INFO entry; others stay out-of-line ksymbols.
void Exporter::find_bpf_programs() {
  std::vector<const BundleEvent*> since_last;  // ksymbol events since the last bpf event
  std::map<uint64_t, size_t> live;              // address -> progs_ index, while loaded
  for (const auto& e : b_.events) {
    if ((e.kind == BundleEvent::Kind::KsymbolRegister || e.kind == BundleEvent::Kind::KsymbolUnregister) &&
        e.ksym_type == PERF_RECORD_KSYMBOL_TYPE_BPF && !is_bpf_image_name(e.name)) {
      since_last.push_back(&e);
      continue;
    }
    if (e.kind != BundleEvent::Kind::BpfLoad && e.kind != BundleEvent::Kind::BpfUnload) continue;
    const BundleEvent* k = since_last.size() == 1 ? since_last[0] : nullptr;
    since_last.clear();
    if (!k) continue;
    std::string prefix = "bpf_prog_" + hex_bytes(e.bpf_tag.data(), e.bpf_tag.size());
    if (k->name.rfind(prefix, 0) != 0) continue;
    if (e.kind == BundleEvent::Kind::BpfLoad && k->kind == BundleEvent::Kind::KsymbolRegister) {
      const TextRecord* text = text_at_load(*k);
      if (!text || prog_ids_.count(e.bpf_id) || k->len == 0) continue;
      perf::BpfProgInfo p;
      p.id = e.bpf_id;
      p.tag = e.bpf_tag;
      p.name = k->name.size() > prefix.size() + 1 ? k->name.substr(prefix.size() + 1) : "";
      p.load_time = e.time;
      p.addr = k->addr;
      p.jited.assign(text->bytes.begin(),
                     text->bytes.begin() + static_cast<long>(std::min<uint64_t>(k->len, text->bytes.size())));
      prog_ksymbols_[k] = progs_.size();
      prog_ids_[e.bpf_id] = progs_.size();
      live[k->addr] = progs_.size();
      progs_.push_back(std::move(p));
    } else if (e.kind == BundleEvent::Kind::BpfUnload && k->kind == BundleEvent::Kind::KsymbolUnregister) {
      auto it = live.find(k->addr);
      if (it == live.end() || progs_[it->second].id != e.bpf_id) continue;
      prog_ksymbols_[k] = it->second;
      live.erase(it);
    }
  }
}

bool Exporter::in_ksymbol_range(uint64_t start, uint64_t end) const {
  for (const auto& [a, z] : ksymbol_ranges_)
    if (start < z && a < end) return true;
  return false;
}

// The text copied when the guest registered this ksymbol or loaded this
// module: the first load copy at its address from a little before the event
// on, else the copy saved before its free.
const TextRecord* Exporter::text_at_load(const BundleEvent& e) const {
  const TextRecord* guard = nullptr;
  for (const auto& r : b_.text.records) {
    if (r.start != e.addr) continue;
    if (r.source == TextSource::Load && r.time + kLoadSlackNs >= e.time) return &r;
    if ((r.source == TextSource::Guard || r.source == TextSource::Unregister) && r.time >= e.time && !guard)
      guard = &r;
  }
  return guard;
}

Status Exporter::build_kcore() {
  if (!b_.kcore_path.empty()) KT_TRY(kcore_.add_elf(b_.kcore_path));
  for (const auto& r : b_.text.records)
    if (r.source == TextSource::Snapshot) kcore_.add(r.start, r.bytes, "snapshot " + r.name);
  // Module text that came later: a segment for each range (its first copy);
  // every load then rewrites it with a TEXT_POKE at its time.
  for (const auto& r : b_.text.records) {
    if (r.source == TextSource::Snapshot || r.bytes.empty()) continue;
    if (in_ksymbol_range(r.start, r.start + r.bytes.size())) continue;
    kcore_.add(r.start, r.bytes, std::string(text_source_name(r.source)) + " " + kthost_text_kind_name(r.kind));
  }
  for (const auto& p : progs_) kcore_.cut(p.addr, p.addr + p.jited.size());
  s_.kcore_segments = kcore_.segments().size();
  s_.kcore_bytes = kcore_.bytes();
  for (const auto& o : kcore_.overlaps())
    s_.notes.push_back({hex(o.start) + "-" + hex(o.end) + " (" + o.origin + "): partly inside text exported before; " +
                            "perf's TEXT_POKEs reach only the parts a kcore segment covers",
                        o.start, o.end});
  return kcore_.write(o_.out_dir + "/kcore_dir/kcore");
}

Status Exporter::add(perf::RecordBytes& r, uint64_t time, uint32_t cpu) {
  perf::append_sample_id(r, {0, 0, time, cpu < 4096 ? cpu : 0, cpu_id(cpu)});
  KT_ASSIGN_OR_RETURN(auto bytes, r.finish());
  KT_TRY(w_->add(bytes));
  return ok_status();
}

Status Exporter::add_poke(uint64_t addr, const std::vector<uint8_t>& old_bytes, const std::vector<uint8_t>& new_bytes,
                          uint64_t time, uint32_t cpu) {
  perf::RecordBytes r(PERF_RECORD_TEXT_POKE, PERF_RECORD_MISC_KERNEL);
  r.u64(addr).u16(static_cast<uint16_t>(old_bytes.size())).u16(static_cast<uint16_t>(new_bytes.size()));
  r.bytes(old_bytes.data(), old_bytes.size()).bytes(new_bytes.data(), new_bytes.size()).pad8();
  return add(r, time, cpu);
}

// Loaded text as TEXT_POKEs with no old bytes, in pieces that fit a record.
Status Exporter::add_load_pokes(uint64_t addr, const std::vector<uint8_t>& text, uint64_t time) {
  for (size_t off = 0; off < text.size(); off += kMaxPokeBytes) {
    size_t n = std::min(kMaxPokeBytes, text.size() - off);
    std::vector<uint8_t> piece(text.begin() + static_cast<long>(off), text.begin() + static_cast<long>(off + n));
    KT_TRY(add_poke(addr + off, {}, piece, time, 0));
    s_.load_pokes++;
  }
  return ok_status();
}

Status Exporter::write_records() {
  const BundleClock& c = b_.manifest.clock;
  // PT TSC = guest TSC + pt_offset, and perf time = time_zero + f(guest TSC):
  // perf's time_zero for PT TSC absorbs f(pt_offset).
  uint64_t time_zero = 0;
  uint32_t mult = 1;
  uint16_t shift = 0;
  if (!c.identity) {
    if (c.time_mult == 0)
      return Error(ErrorCode::InvalidArgument,
                   "the bundle's clock is unknown (the trace ended before the guest sent it): PT cannot be timed");
    mult = c.time_mult;
    shift = c.time_shift;
    uint64_t off = static_cast<uint64_t>(c.pt_offset);
    time_zero = c.pt_offset >= 0 ? c.time_zero - tsc_to_ns_part(off, mult, shift)
                                 : c.time_zero + tsc_to_ns_part(0 - off, mult, shift);
  }

  perf::EventAttr pt;
  pt.attr.type = kPmuType;
  pt.attr.size = perf::kAttrSize;
  pt.attr.config = kTscBit | kNoRetCompBit;
  pt.attr.sample_period = 1;
  pt.attr.sample_type = perf::kSampleType;
  pt.attr.exclude_user = 1;
  pt.attr.exclude_hv = 1;
  pt.attr.exclude_guest = 0;
  pt.attr.sample_id_all = 1;
  pt.attr.mmap = 1;
  pt.attr.comm = 1;
  pt.attr.ksymbol = 1;
  pt.attr.text_poke = 1;
  pt.name = "intel_pt//k";
  for (uint32_t cpu : b_.manifest.cpus) pt.ids.push_back(cpu_id(cpu));
  if (pt.ids.empty()) pt.ids.push_back(cpu_id(0));
  KT_ASSIGN_OR_RETURN(auto w, perf::PerfFileWriter::create(o_.out_dir + "/data", {pt}));
  w_.emplace(std::move(w));

  {
    perf::RecordBytes r(perf::kRecordAuxtraceInfo, 0);
    r.u32(perf::kAuxtraceIntelPt).u32(0);
    uint64_t priv[perf::kPtPrivWords] = {};
    priv[perf::kPtPmuType] = kPmuType;
    priv[perf::kPtTimeShift] = shift;
    priv[perf::kPtTimeMult] = mult;
    priv[perf::kPtTimeZero] = time_zero;
    priv[perf::kPtCapUserTimeZero] = 1;
    priv[perf::kPtTscBit] = kTscBit;
    priv[perf::kPtNoRetCompBit] = kNoRetCompBit;
    priv[perf::kPtPerCpuMmaps] = 1;
    priv[perf::kPtMtcBit] = kMtcBit;
    priv[perf::kPtMtcFreqBits] = kMtcFreqBits;
    priv[perf::kPtTscCtcN] = 2;
    priv[perf::kPtTscCtcD] = 1;
    priv[perf::kPtCycBit] = kCycBit;
    priv[perf::kPtMaxNonTurboRatio] = 20;
    for (uint64_t v : priv) r.u64(v);
    KT_ASSIGN_OR_RETURN(auto bytes, r.finish());
    KT_TRY(w_->add(bytes));
  }

  // The kernel map, as perf record synthesizes it: [kernel.kallsyms]_text at
  // _text, its page offset the address of _text (the relocation reference).
  KernelSymbols ks = find_kernel_symbols(b_.kallsyms);
  if (!ks.text) return Error(ErrorCode::InvalidArgument, b_.dir + "/kallsyms: no _text symbol");
  {
    uint64_t end = ks.etext > ks.text ? ks.etext : ks.text + (uint64_t{64} << 20);
    perf::RecordBytes r(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL);
    r.u32(UINT32_MAX).u32(0).u64(ks.text).u64(end - ks.text).u64(ks.text).padded_string("[kernel.kallsyms]_text");
    KT_TRY(add(r, 0, 0));
  }

  // The modules loaded at the start, as perf record lists them: "[name]" at
  // the address /proc/modules gives (perf checks kcore_dir/modules against them).
  for (const auto& m : parse_modules_text(b_.modules)) {
    perf::RecordBytes r(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL);
    r.u32(UINT32_MAX).u32(0).u64(m.start).u64(m.size).u64(0).padded_string("[" + m.name + "]");
    KT_TRY(add(r, 0, 0));
  }

  // Sideband in time order: ksymbols with their text, module loads, pokes.
  std::vector<const BundleEvent*> events;
  for (const auto& e : b_.events) events.push_back(&e);
  std::stable_sort(events.begin(), events.end(), [](const auto* a, const auto* b) { return a->time < b->time; });
  for (const BundleEvent* e : events) {
    switch (e->kind) {
      case BundleEvent::Kind::KsymbolRegister: {
        const TextRecord* text = text_at_load(*e);
        const uint64_t begin = begin_time(e->addr, e->addr + std::max<uint64_t>(e->len, 1), e->time);
        if (is_bpf_image_name(e->name)) {
          if (text) KT_TRY(add_load_pokes(e->addr, text->bytes, begin));
          break;
        }
        if (prog_ksymbols_.count(e)) {
          perf::RecordBytes r(PERF_RECORD_KSYMBOL, PERF_RECORD_MISC_KERNEL);
          r.u64(e->addr).u32(static_cast<uint32_t>(e->len)).u16(PERF_RECORD_KSYMBOL_TYPE_BPF).u16(0);
          r.padded_string(e->name);
          KT_TRY(add(r, begin, e->cpu));
          prog_begin_[progs_[prog_ksymbols_.at(e)].id] = begin;
          s_.ksymbols++;
          break;
        }
        if (!text) {
          s_.notes.push_back({hex(e->addr) + ": no text was saved for ksymbol " + e->name +
                                  " (perf decodes it as unmapped)",
                              e->addr, e->addr + e->len});
          break;
        }
        perf::RecordBytes r(PERF_RECORD_KSYMBOL, PERF_RECORD_MISC_KERNEL);
        r.u64(e->addr).u32(static_cast<uint32_t>(e->len)).u16(PERF_RECORD_KSYMBOL_TYPE_OOL).u16(0);
        r.padded_string(e->name);
        KT_TRY(add(r, begin, e->cpu));
        s_.ksymbols++;
        std::vector<uint8_t> bytes(text->bytes.begin(),
                                   text->bytes.begin() + static_cast<long>(std::min<uint64_t>(e->len, text->bytes.size())));
        KT_TRY(add_load_pokes(e->addr, bytes, begin + 1));
        break;
      }
      case BundleEvent::Kind::KsymbolUnregister: {
        if (is_bpf_image_name(e->name)) break;
        perf::RecordBytes r(PERF_RECORD_KSYMBOL, PERF_RECORD_MISC_KERNEL);
        r.u64(e->addr).u32(static_cast<uint32_t>(e->len));
        r.u16(prog_ksymbols_.count(e) ? PERF_RECORD_KSYMBOL_TYPE_BPF : PERF_RECORD_KSYMBOL_TYPE_OOL);
        r.u16(PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER).padded_string(e->name);
        KT_TRY(add(r, e->time, e->cpu));
        break;
      }
      case BundleEvent::Kind::BpfLoad:
      case BundleEvent::Kind::BpfUnload: {
        if (!prog_ids_.count(e->bpf_id)) break;
        perf::RecordBytes r(PERF_RECORD_BPF_EVENT, 0);
        r.u16(e->kind == BundleEvent::Kind::BpfLoad ? perf::kBpfEventProgLoad : perf::kBpfEventProgUnload).u16(0);
        r.u32(e->bpf_id).bytes(e->bpf_tag.data(), e->bpf_tag.size());
        // A load right after its KSYMBOL (which made the map it fills).
        uint64_t time = e->time;
        if (auto b = prog_begin_.find(e->bpf_id); e->kind == BundleEvent::Kind::BpfLoad && b != prog_begin_.end())
          time = std::min(time, b->second + 1);
        KT_TRY(add(r, time, e->cpu));
        s_.bpf_events++;
        break;
      }
      case BundleEvent::Kind::ModuleLoad: {
        // The copy taken at this load; its init text comes with its guard copy.
        // (When no load copy was taken, the copy saved before its free, as kthost's image uses it.)
        const uint64_t begin = begin_time(e->addr, e->addr + std::max<uint64_t>(e->len, 1), e->time);
        if (const TextRecord* t = text_at_load(*e)) KT_TRY(add_load_pokes(t->start, t->bytes, begin));
        for (const auto& t : b_.text.records)
          if (t.source == TextSource::Guard && t.kind == KTHOST_TEXT_MODULE_INIT && t.time >= e->time) {
            KT_TRY(add_load_pokes(t.start, t.bytes, begin_time(t.start, t.start + t.bytes.size(), e->time)));
            break;
          }
        break;
      }
      case BundleEvent::Kind::Lost: {
        // Sideband the guest lost (its perf ring, ktguest's queue): perf
        // shows them as lost events. Other loss kinds are in the note.
        if (e->count == 0 || (e->lost_kind != "perf-ring" && e->lost_kind != "queue")) break;
        perf::RecordBytes r(PERF_RECORD_LOST, 0);
        r.u64(cpu_id(e->cpu)).u64(e->count);
        KT_TRY(add(r, e->time, e->cpu));
        s_.lost_records += e->count;
        break;
      }
      case BundleEvent::Kind::TextPoke:
        if (e->old_bytes.size() > kMaxPokeBytes || e->new_bytes.size() > kMaxPokeBytes) {
          s_.notes.push_back({hex(e->addr) + ": a poke of " + std::to_string(e->new_bytes.size()) +
                                  " bytes is too large for a perf record (left out)",
                              e->addr, e->addr + e->new_bytes.size()});
          break;
        }
        KT_TRY(add_poke(e->addr, e->old_bytes, e->new_bytes, e->time, e->cpu));
        s_.text_pokes++;
        break;
      default: break;
    }
  }
  KT_TRY(w_->add(perf::RecordBytes(perf::kRecordFinishedRound, 0).finish().value()));

  // Each vCPU's PT, in buffers that start at a PSB.
  for (const auto& [cpu, data] : b_.pt) {
    if (data.empty()) continue;
    constexpr uint64_t kBuffer = 8u << 20;
    // A buffer's reference is a TSC near its start: perf's decoder takes a
    // TSC packet's upper byte from it, and without one it never sets its
    // clock (perf record stores the TSC when it read the buffer).
    auto pieces = split_at_psb(cpu, data);
    if (pieces.empty()) pieces.push_back({cpu, 0, data.size(), 0});
    uint64_t begin = 0, reference = pieces[0].time;
    for (size_t i = 0; i < pieces.size(); ++i) {
      uint64_t end = i + 1 < pieces.size() ? pieces[i + 1].begin : data.size();
      if (end - begin < kBuffer && i + 1 < pieces.size()) continue;
      KT_TRY(w_->add_auxtrace(data.data() + begin, end - begin, begin, reference, cpu, UINT32_MAX, cpu));
      s_.auxtrace_records++;
      begin = end;
      if (i + 1 < pieces.size()) reference = pieces[i + 1].time;
    }
    s_.pt_bytes += data.size();
  }
  // AUX losses the kernel reported (hardware PT), as perf record gets them:
  // PERF_RECORD_AUX with the flag, one per time it happened. Where in the
  // stream is not known, so each sits at the end of its vCPU's trace.
  for (const auto& [name, count] : b_.losses) {
    auto key = aux_loss_key(name);
    if (!key || count == 0) continue;
    auto [flag, cpu] = *key;
    auto it = b_.pt.find(cpu);
    uint64_t end = it == b_.pt.end() ? 0 : it->second.size();
    uint64_t last_tsc = 0;
    if (it != b_.pt.end())
      for (const auto& p : split_at_psb(cpu, it->second)) last_tsc = std::max(last_tsc, p.time);
    uint64_t time = time_zero + tsc_to_ns_part(last_tsc, mult, shift);
    uint64_t n = std::min(count, kMaxAuxFlagRecords);
    for (uint64_t i = 0; i < n; ++i) {
      perf::RecordBytes r(PERF_RECORD_AUX, 0);
      r.u64(end).u64(0).u64(flag);
      KT_TRY(add(r, time, cpu));
      s_.aux_flag_records++;
    }
    if (count > n)
      s_.notes.push_back({"vCPU " + std::to_string(cpu) + ": " + name + " = " + std::to_string(count) + "; only " +
                          std::to_string(n) + " PERF_RECORD_AUX records written for it"});
  }
  KT_TRY(w_->add(perf::RecordBytes(perf::kRecordFinishedRound, 0).finish().value()));

  w_->set_string_feature(perf::kFeatHostname, "kthost-guest");
  w_->set_string_feature(perf::kFeatOsRelease, "guest");
  w_->set_string_feature(perf::kFeatVersion, "kthost 0.1.0");
  w_->set_string_feature(perf::kFeatArch, "x86_64");
  uint32_t ncpu = b_.manifest.cpus.empty() ? 1 : *std::max_element(b_.manifest.cpus.begin(), b_.manifest.cpus.end()) + 1;
  w_->set_nr_cpus(ncpu, ncpu);
  w_->set_string_feature(perf::kFeatCpuDesc, "kthost guest vCPU");
  w_->set_string_feature(perf::kFeatCpuId, "GenuineIntel,6,85,4");
  w_->set_cmdline(o_.cmdline);
  if (!progs_.empty()) w_->set_feature(perf::kFeatBpfProgInfo, perf::encode_bpf_prog_info(progs_));
  s_.bpf_programs = progs_.size();
  s_.data_bytes = w_->data_bytes();
  return w_->close();
}

Result<PerfExportSummary> Exporter::run() {
  if (b_.kallsyms.empty())
    return Error(ErrorCode::InvalidArgument, b_.dir + ": the bundle has no kallsyms, and perf needs one");
  // BPF images get a static symbol (the first name at an address) and their
  // text in kcore; every other ksymbol is a KSYMBOL record.
  std::string kallsyms = b_.kallsyms;
  if (!kallsyms.empty() && kallsyms.back() != '\n') kallsyms += '\n';
  std::map<uint64_t, std::string> images;
  for (const auto& e : b_.events) {
    if (e.kind != BundleEvent::Kind::KsymbolRegister) continue;
    if (!is_bpf_image_name(e.name)) {
      ksymbol_ranges_.push_back({e.addr, e.addr + e.len});
      continue;
    }
    auto [it, added] = images.emplace(e.addr, e.name);
    if (added) {
      char addr[32];
      std::snprintf(addr, sizeof addr, "%016lx", static_cast<unsigned long>(e.addr));
      kallsyms += std::string(addr) + " t " + e.name + "\t[bpf]\n";
    } else if (it->second != e.name) {
      s_.notes.push_back({hex(e.addr) + ": " + e.name + " reuses the address of " + it->second +
                              "; perf names both " + it->second,
                          e.addr, e.addr + std::max<uint64_t>(e.len, 1)});
    }
  }
  for (const auto& r : b_.text.records)
    if (r.source == TextSource::Guard || r.source == TextSource::Unregister)
      ends_.push_back({r.start, r.start + r.bytes.size(), r.time});
  for (const auto& e : b_.events)
    if (e.kind == BundleEvent::Kind::KsymbolUnregister || e.kind == BundleEvent::Kind::ModuleUnload)
      ends_.push_back({e.addr, e.addr + std::max<uint64_t>(e.len, 1), e.time});
  find_bpf_programs();
  KT_TRY(make_dir(o_.out_dir));
  KT_TRY(make_dir(o_.out_dir + "/kcore_dir"));
  KT_TRY(build_kcore());
  KT_TRY(write_file_atomic(o_.out_dir + "/kcore_dir/kallsyms", kallsyms));
  KT_TRY(write_file_atomic(o_.out_dir + "/kcore_dir/modules", b_.modules));
  KT_TRY(write_records());
  for (const auto& [name, count] : b_.losses)
    if (count && !aux_loss_key(name) && name != "perf_ring" && name != "queue")
      s_.notes.push_back({"loss " + name + " = " + std::to_string(count) + " (perf.data has no place for it)"});
  // The guest's perf-ring and queue losses went in as PERF_RECORD_LOST from
  // their events; a count beyond them is said.
  uint64_t sideband_lost = (b_.losses.count("perf_ring") ? b_.losses.at("perf_ring") : 0) +
                           (b_.losses.count("queue") ? b_.losses.at("queue") : 0);
  if (sideband_lost > s_.lost_records)
    s_.notes.push_back({"loss perf_ring + queue = " + std::to_string(sideband_lost) + ", of which " +
                        std::to_string(s_.lost_records) + " are in PERF_RECORD_LOST records (the rest had no event)"});
  return s_;
}

}  // namespace

Result<PerfExportSummary> export_perf_data(const Bundle& bundle, const PerfExportOptions& options) {
  return Exporter(bundle, options).run();
}

bool PerfExportSummary::notes_have_ranges() const {
  return std::any_of(notes.begin(), notes.end(), [](const ExportNote& n) { return n.end > n.start; });
}

void count_note_instructions(std::vector<ExportNote>& notes, const Profile& profile, const Symbolizer& symbols) {
  for (auto& n : notes) {
    if (n.end <= n.start) continue;
    uint64_t insns = 0;
    for (const auto& [id, counts] : profile.functions) {
      const FunctionInfo& f = symbols.function(id);
      if (f.start >= n.start && f.start < n.end) insns += counts.insns;
    }
    n.insns = insns;
  }
}

}  // namespace kt
