// kthost trace: follow a running guest (--vm FILE or --domain NAME), record
// its kernel's execution as Intel PT and keep every version of its kernel
// text, with ktguard's holds answered from guest RAM:
//
//   DIR/pt/cpuN.pt     PT per vCPU (hardware intel_pt under KVM, or the TCG plugin)
//   DIR/text.kts       the text store (host/textstore), flushed every second
//   DIR/events.jsonl   every sideband event, one JSON object per line
//   DIR/holds.jsonl    every guard hold as the host saw it
//   DIR/summary.json   counts and losses, written at the end
//
// The guest is never paused: a hold stops only the freeing context, inside
// the guest, and ends at ktguard's timeout if this process dies.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "command.h"
#include "target.h"
#include "kthost/bundle/bundle.h"
#include "kthost/capture/pt_capture.h"
#include "kthost/capture/text_saver.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/introspect/backends.h"
#include "kthost/introspect/kernel_layout.h"
#include "kthost/pt/kvm_tsc.h"
#include "kthost/snapshot/snapshot.h"
#include "kthost/pt/requirements.h"
#include "kthost/sideband/channel.h"
#include "kthost/sideband/event_log.h"
#include "kthost/vm/qmp_client.h"
#include "kthost/vm/vm_description.h"

namespace kt::cli {
namespace {

const char* kName = "trace";
std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }
using Clock = std::chrono::steady_clock;

class LineFile {
 public:
  static Result<LineFile> create(const std::string& path) {
    LineFile f;
    f.fp_ = std::fopen(path.c_str(), "we");
    if (!f.fp_) return io_error("create " + path, errno);
    return f;
  }
  LineFile() = default;
  LineFile(LineFile&& o) noexcept : fp_(std::exchange(o.fp_, nullptr)) {}
  ~LineFile() {
    if (fp_) std::fclose(fp_);
  }
  void line(const std::string& s) {
    std::fputs(s.c_str(), fp_);
    std::fputc('\n', fp_);
  }
  void flush() { std::fflush(fp_); }

 private:
  FILE* fp_ = nullptr;
};

nlohmann::json hold_json(const HoldRecord& h) {
  nlohmann::json j = {{"id", h.id},         {"kind", h.kind},       {"cpu", h.cpu},
                      {"start", hex(h.start)}, {"end", hex(h.end)},   {"bytes", h.end - h.start},
                      {"guest_time", h.guest_time}, {"status", h.status}, {"copy_us", h.copy_us},
                      {"host_us", h.host_us}, {"word_acked", h.word_acked}};
  if (!h.error.empty()) j["error"] = h.error;
  if (!h.word_error.empty()) j["word_error"] = h.word_error;
  return j;
}

struct Totals {
  uint64_t holds = 0, acks_failed = 0;
  double host_us_max = 0, host_us_total = 0;
};

nlohmann::json summary_json(const EventLog& log, const SidebandDecoder& dec, const TextSaver& saver,
                            uint64_t text_records, uint64_t text_bytes, const Totals& t, bool guard, double seconds,
                            const std::string& end_reason) {
  const auto& s = saver.stats();
  const auto& st = dec.stats();
  nlohmann::json j = {
      {"seconds", seconds},
      {"end", end_reason},
      {"guard", guard},
      {"events", log.size()},
      {"text_pokes", log.count("text_poke")},
      {"ksymbols", log.count("ksymbol")},
      {"module_loads", log.count("module_load")},
      {"module_unloads", log.count("module_unload")},
      {"holds", t.holds},
      {"holds_failed", s.guard_failed},
      {"holds_word_acked", s.word_acks},
      {"holds_word_ack_failed", s.word_ack_failed},
      {"hold_host_us_max", t.host_us_max},
      {"hold_host_us_mean", t.holds ? t.host_us_total / static_cast<double>(t.holds) : 0.0},
      {"text_records", text_records},
      {"text_bytes", text_bytes},
      {"load_copies", s.load_copies},
      {"load_failed", s.load_failed},
      {"loads_from_guard", s.loads_from_guard},
      {"unregister_copies", s.unregister_copies},
      {"unloads_seen", s.unloads_seen},
      {"unloads_lost", s.unloads_lost},
      {"store_errors", s.store_errors},
      {"lost_perf_ring", log.lost(1)},
      {"lost_queue", log.lost(2)},
      {"lost_guard_miss", log.lost(3)},
      {"lost_module_race", log.lost(4)},
      {"lost_unguarded", log.lost(5)},
      {"guard_missed_since_load", log.lost_since_load(3)},
      {"unguarded_since_load", log.lost_since_load(5)},
      {"decode_errors", st.errors()},
      {"frames_missing", st.frames_missing},
  };
  if (!saver.lost_unloads().empty()) j["lost_unload_examples"] = saver.lost_unloads();
  return j;
}

// Loss counters into the bundle's losses.json (written at each flush).
void set_losses(BundleWriter& bundle, const EventLog& log, const TextSaver& saver) {
  bundle.set_loss("perf_ring", log.lost(1));
  bundle.set_loss("queue", log.lost(2));
  bundle.set_loss("guard_miss", log.lost(3));
  bundle.set_loss("module_race", log.lost(4));
  bundle.set_loss("unguarded", log.lost(5));
  bundle.set_loss("unloads_lost", saver.stats().unloads_lost);
  bundle.set_loss("guard_failed", saver.stats().guard_failed);
}

// /proc/kallsyms and /proc/modules text from the guest's state dump.
std::string kallsyms_text(const GuestState& st) {
  std::string out;
  char line[64];
  for (const auto& s : st.symbols) {
    std::snprintf(line, sizeof line, "%016llx %c ", static_cast<unsigned long long>(s.addr), s.type);
    out += line;
    out += s.name;
    if (!s.module.empty()) out += "\t[" + s.module + "]";
    out += '\n';
  }
  return out;
}
std::string modules_text(const GuestState& st) {
  std::string out;
  for (const auto& m : st.modules)
    out += m.name + " " + std::to_string(m.core_size) + " 0 - Live " + hex(m.core_addr) + "\n";
  return out;
}

// Sideband (guest perf ns) to PT time: perf's clock parameters, plus, for the
// TCG plugin (which stamps host TSC), the guest-to-host TSC offset bounded
// from the events' arrival times.
BundleClock bundle_clock(const GuestClock& g, std::optional<int64_t> offset) {
  BundleClock c;
  c.identity = false;
  c.time_zero = g.time_zero;
  c.time_mult = g.time_mult ? g.time_mult : 1;
  c.time_shift = g.time_shift;
  c.pt_offset = offset.value_or(0);
  return c;
}

// kcore of every text range, as kthost snapshot writes it, into the bundle.
Status write_initial_snapshot(PageWalker& walker, const KernelLayout& layout, const std::string& dir,
                              BundleWriter& bundle) {
  std::string tmp = dir + "/.snapshot";
  auto written = write_snapshot(walker, layout, "", "", tmp);
  if (!written) return written.take_error();
  auto kcore = read_file(tmp + "/kcore", size_t{2} << 30);
  for (const char* f : {"kcore", "kallsyms", "modules", "layout.json"}) ::unlink((tmp + "/" + f).c_str());
  ::rmdir(tmp.c_str());
  if (!kcore) return kcore.take_error();
  if (written->unreadable_pages)
    std::fprintf(stderr, "kthost trace: %lu pages were unmapped during the initial snapshot (zero-filled)\n",
                 static_cast<unsigned long>(written->unreadable_pages));
  return bundle.write_whole_file("kcore", *kcore);
}

// The PT source for --pt: hardware where this machine has everything for it
// (kthost doctor's checks) and the guest runs under KVM; else the TCG plugin
// where the guest's QEMU runs it; else a clear error.
Result<std::unique_ptr<PtCapture>> open_pt(const std::string& choice, Target& target, const std::string& out_dir,
                                           const PtConfig& config) {
  if (choice == "none") return std::unique_ptr<PtCapture>();
  std::string why_not_hw;
  if (choice == "auto" || choice == "hardware") {
    for (const auto& c : check_hardware_pt_requirements(live_system_roots()))
      if (!c.ok && why_not_hw.empty()) why_not_hw = c.name + ": " + c.detail;
    if (why_not_hw.empty() && target.vm.accel != "kvm") why_not_hw = "the guest runs under " + target.vm.accel + ", not KVM";
    if (why_not_hw.empty()) return PtCapture::hardware(*target.monitor, out_dir + "/pt-hw", config);
    if (choice == "hardware")
      return Error(ErrorCode::Unsupported, "no hardware PT: " + why_not_hw + " (kthost doctor says how to fix it)");
  }
  auto sw = PtCapture::software(target.vm.pt_plugin_out, target.vm.pt_plugin_trigger, target.vm.vcpus);
  if (sw || choice == "software") return sw;
  return Error(ErrorCode::Unsupported, "no PT source for " + target.label + ": hardware: " + why_not_hw +
                                           "; software: " + sw.error().message + ". --pt none traces without PT");
}

int run(const std::vector<std::string>& args) {
  Options opt;
  target_options(opt);
  opt.value("output", "DIR", "trace directory to create (-o)");
  opt.value("duration", "SECONDS", "stop after this long (default: until Ctrl-C or SIGTERM)");
  opt.value("backend", "NAME", "guest memory backend: auto (default), mmap, process");
  opt.value("pt", "SOURCE", "PT source: auto (default: hardware where doctor allows it, else the TCG plugin), "
                            "hardware, software, none");
  opt.value("pt-psb", "N", "hardware PT: a PSB every 2^(11+N) bytes (default 4 KiB where the CPU lists it)");
  opt.value("pt-mtc", "N", "hardware PT: MTC every 2^N crystal ticks (default 3); \"off\" for none");
  opt.value("pt-cyc", "N", "hardware PT: cycle-accurate mode with CYC threshold N (default off)");
  opt.flag("pt-no-tsc", "hardware PT: no TSC packets");
  opt.flag("no-guard", "do not answer ktguard: unloads are saved best effort from unregister events");
  opt.flag("no-ack-word", "answer holds only through the channel, not also by storing the notice's ack word "
                          "in guest RAM (slower; for comparison)");
  opt.flag("json", "print the summary as JSON on stdout");
  std::vector<std::string> a = args;
  for (auto& s : a)
    if (s == "-o") s = "--output";
  if (auto exit_status = parse_command_line(opt, kName, a)) return *exit_status;
  auto out_dir = opt.get("output");
  if (!out_dir) return fail(kName, Error(ErrorCode::InvalidArgument, "-o DIR is required"));
  double duration = 0;
  if (auto d = opt.get("duration")) duration = std::atof(d->c_str());
  bool guard = !opt.has("no-guard");
  auto choice = parse_backend_choice(opt.get_or("backend", "auto"));
  if (!choice) return fail(kName, choice.error());
  if (*choice == BackendChoice::Monitor)
    return fail(kName, Error(ErrorCode::InvalidArgument, "--backend xp is too slow to answer guard holds"));
  auto target = open_target(opt);
  if (!target) return fail(kName, target.error());
  const VmDescription& vm = target->vm;
  if (vm.channel.empty())
    return fail(kName, Error(ErrorCode::Unsupported, target->label + " has no org.kthost.0 channel"));

  auto pt_choice = opt.get_or("pt", "auto");
  if (pt_choice != "auto" && pt_choice != "hardware" && pt_choice != "software" && pt_choice != "none")
    return fail(kName, Error(ErrorCode::InvalidArgument, "--pt must be auto, hardware, software or none"));

  // Guest memory and the kernel's page tables, from vCPU 0's CR3.
  std::unique_ptr<GuestMemory> memory;
  KernelLayout layout;
  {
    auto m = open_guest_memory(*target->monitor, vm, *choice);
    if (!m) return fail(kName, m.error());
    memory = std::move(*m);
    auto regs = read_registers(*target->monitor, 0);
    if (!regs) return fail(kName, regs.error());
    auto l = discover_kernel_layout(*memory, *regs, GuestSymbols{});
    if (!l) return fail(kName, l.error());
    layout = std::move(*l);
  }
  PageWalker walker(*memory, layout.paging);

  PtConfig pt_config;
  {
    auto number = [&](const char* name, unsigned max) -> Result<std::optional<unsigned>> {
      auto v = opt.get(name);
      if (!v || *v == "off") return std::optional<unsigned>();
      auto n = parse_u64(*v);
      if (!n || *n > max)
        return Error(ErrorCode::InvalidArgument, std::string("--") + name + " takes 0.." + std::to_string(max));
      return std::optional<unsigned>(static_cast<unsigned>(*n));
    };
    auto psb = number("pt-psb", 15), mtc = number("pt-mtc", 15), cyc = number("pt-cyc", 15);
    for (auto* r : {&psb, &mtc, &cyc})
      if (!*r) return fail(kName, r->error());
    pt_config.psb_period = *psb;
    if (opt.get("pt-mtc")) {
      pt_config.mtc = mtc->has_value();
      if (*mtc) pt_config.mtc_period = **mtc;
    }
    if (*cyc) {
      pt_config.cyc = true;
      pt_config.cyc_threshold = **cyc;
    }
    pt_config.tsc = !opt.has("pt-no-tsc");
  }
  auto pt = open_pt(pt_choice, *target, *out_dir, pt_config);
  if (!pt) return fail(kName, pt.error());
  // The bundle (docs/BUNDLE.md). Its clock is set when the guest says hello.
  BundleClock clock;
  clock.identity = false;
  auto writer = BundleWriter::create(*out_dir, *pt ? (*pt)->cpus() : std::vector<uint32_t>{}, clock);
  if (!writer) return fail(kName, writer.error());
  BundleWriter& bundle = **writer;
  auto holds_file = LineFile::create(*out_dir + "/holds.jsonl");
  if (!holds_file) return fail(kName, holds_file.error());
  auto pt_sink = [&](uint32_t cpu, const uint8_t* data, size_t len) { return bundle.append_pt(cpu, data, len); };

  auto channel = SidebandChannel::connect(vm.channel, std::chrono::seconds(10), guard);
  if (!channel) return fail(kName, channel.error());
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  uint64_t text_records = 0, text_bytes = 0;
  TextSaver saver(
      walker,
      [&](const TextRecord& r) {
        ++text_records;
        text_bytes += r.bytes.size();
        return bundle.append_text(r);
      },
      guard);
  // The ack word: the one store kthost makes into guest RAM. It ends a hold
  // as soon as the text is saved; the channel ack follows regardless.
  bool ack_word = guard && !opt.has("no-ack-word");
  if (ack_word)
    saver.set_ack_word_writer([&memory](uint64_t gpa, uint64_t value) { return memory->write_word(gpa, value); });
  EventLog log;
  Totals totals;
  bool word_error_shown = false;
  bool tty = ::isatty(2);
  std::fprintf(stderr, "kthost trace: %s, memory %s, guard %s, writing %s\n", target->label.c_str(),
               memory->backend_name().c_str(),
               guard ? (ack_word ? "on (ack words)" : "on (channel acks only)") : "off (best effort)",
               out_dir->c_str());
  if (*pt) {
    if (auto st = (*pt)->start(); !st) return fail(kName, st.error().with_context("starting PT"));
    std::fprintf(stderr, "kthost trace: PT from the %s source on %zu vCPUs\n", (*pt)->kind().c_str(),
                 (*pt)->cpus().size());
  }
  // The initial text: every executable range of the kernel, modules and BPF
  // packs, read now (later changes come through the sideband).
  if (auto st = write_initial_snapshot(walker, layout, *out_dir, bundle); !st)
    return fail(kName, st.error().with_context("initial snapshot"));
  bool have_symbols = false;
  GuestClock guest_clock;
  std::optional<int64_t> offset_bound;
  // Hardware PT stamps the host TSC; the guest's is host * ratio + offset
  // (KVM debugfs). Without scaling, the guest-to-PT offset is exact.
  if (*pt && (*pt)->kind() == "hardware") {
    if (auto tsc = read_kvm_tsc(vm.pid); tsc && !tsc->vcpus.empty() && !tsc->vcpus.front().ratio)
      offset_bound = -tsc->vcpus.front().offset;
    else
      std::fprintf(stderr, "kthost trace: no exact guest TSC offset (%s): sideband times are aligned by the "
                           "decoder's candidate windows only\n",
                   tsc ? "TSC scaling in use" : tsc.error().message.c_str());
  }
  auto start = Clock::now(), last_flush = start;
  std::string end_reason = "duration";
  int status = 0;
  for (;;) {
    if (g_signal) {
      end_reason = g_signal == SIGINT ? "SIGINT" : "SIGTERM";
      break;
    }
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (duration > 0 && elapsed >= duration) break;
    auto events = channel->poll(std::chrono::milliseconds(100));
    uint64_t received_tsc = __rdtsc();
    if (!events) {
      std::fprintf(stderr, "\nkthost trace: %s\n", events.error().message.c_str());
      end_reason = "channel: " + events.error().message;
      status = 1;
      break;
    }
    for (const auto& ev : *events) {
      if (const auto* n = std::get_if<GuardNoticeEvent>(&ev.body); n && guard) {
        auto t0 = Clock::now();
        HoldRecord h = saver.on_guard_notice(ev, *n);
        auto ack = channel->send_guard_ack(n->id, h.status);
        if (!h.word_error.empty() && !word_error_shown) {
          word_error_shown = true;
          std::fprintf(stderr, "\nkthost trace: cannot store ack words (holds wait for the channel ack): %s\n",
                       h.word_error.c_str());
        }
        h.host_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!ack) {
          h.error = h.error.empty() ? "ack: " + ack.error().message : h.error;
          totals.acks_failed++;
        }
        totals.holds++;
        totals.host_us_total += h.host_us;
        totals.host_us_max = std::max(totals.host_us_max, h.host_us);
        holds_file->line(hold_json(h).dump());
      } else {
        saver.on_event(ev);
      }
      if (auto st = bundle.append_event_json(to_json(ev)); !st) {
        end_reason = "bundle: " + st.error().message;
        status = 1;
      }
      if (const auto* hello = std::get_if<HelloEvent>(&ev.body)) {
        guest_clock = hello->clock;
        if (*pt && (*pt)->kind() == "software") offset_bound.reset();  // a new guest clock session
      }
      // Every timestamped event bounds the guest-TSC -> host-TSC offset from
      // above (it arrived after it happened); the smallest bound is within
      // the fastest delivery (a guard notice's, well under a millisecond).
      if (ev.time && guest_clock.valid && *pt && (*pt)->kind() == "software")
        if (auto g = guest_clock.to_tsc(ev.time)) {
          auto bound = static_cast<int64_t>(received_tsc - *g);
          if (!offset_bound || bound < *offset_bound) offset_bound = bound;
        }
      if (std::holds_alternative<StateDumpEvent>(ev.body) && !have_symbols) {
        have_symbols = true;
        (void)bundle.write_whole_file("kallsyms", kallsyms_text(channel->decoder().state()));
        (void)bundle.write_whole_file("modules", modules_text(channel->decoder().state()));
      }
    }
    if (status) break;
    log.append(std::move(*events));
    if (*pt) {
      if (auto st = (*pt)->poll(pt_sink); !st) {
        std::fprintf(stderr, "\nkthost trace: PT: %s\n", st.error().message.c_str());
        end_reason = "PT: " + st.error().message;
        status = 1;
        break;
      }
    }
    auto now = Clock::now();
    if (now - last_flush >= std::chrono::seconds(1)) {
      last_flush = now;
      // A guest that stopped or crashed, or libvirtd gone: end cleanly.
      if (auto alive = target->check_alive(); !alive) {
        std::fprintf(stderr, "\nkthost trace: %s\n", alive.error().message.c_str());
        end_reason = "guest: " + alive.error().message;
        status = 1;
        break;
      }
      set_losses(bundle, log, saver);
      if (guest_clock.valid) bundle.set_clock(bundle_clock(guest_clock, offset_bound));
      if (auto st = bundle.flush(); !st) std::fprintf(stderr, "\nkthost trace: %s\n", st.error().message.c_str());
      holds_file->flush();
      if (tty)
        std::fprintf(stderr, "\r%6.0fs  events %zu  pokes %zu  holds %lu  saved %s  PT %s  lost %lu   ", elapsed,
                     log.size(), log.count("text_poke"), static_cast<unsigned long>(totals.holds),
                     human_bytes(text_bytes).c_str(), human_bytes(*pt ? (*pt)->total_bytes() : 0).c_str(),
                     static_cast<unsigned long>(log.lost(1) + log.lost(2) + log.lost(3) + log.lost(4) +
                                                saver.stats().unloads_lost));
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (*pt) {
    if (auto st = (*pt)->stop(pt_sink); !st) {
      std::fprintf(stderr, "kthost trace: PT: %s\n", st.error().message.c_str());
      status = 1;
    }
  }
  set_losses(bundle, log, saver);
  if (guest_clock.valid) bundle.set_clock(bundle_clock(guest_clock, offset_bound));
  auto flushed = bundle.close();
  holds_file->flush();
  auto summary = summary_json(log, channel->decoder(), saver, text_records, text_bytes, totals, guard, seconds, end_reason);
  summary["pt_source"] = *pt ? (*pt)->kind() : "none";
  if (*pt && (*pt)->kind() == "hardware") {
    // Guest TSC = host TSC * ratio + offset per vCPU: what maps the guest's
    // sideband times onto the host-TSC times in hardware PT.
    if (auto tsc = read_kvm_tsc(vm.pid); tsc) {
      for (const auto& v : tsc->vcpus)
        summary["kvm_tsc"][std::to_string(v.vcpu)] = {{"offset", v.offset},
                                                      {"ratio", v.ratio ? *v.ratio : 0},
                                                      {"frac_bits", v.frac_bits}};
    } else {
      summary["kvm_tsc_error"] = tsc.error().message;
    }
  }
  summary["pt_bytes"] = *pt ? (*pt)->total_bytes() : 0;
  if (*pt)
    for (const auto& s : (*pt)->stats()) {
      summary["pt_bytes_per_cpu"][std::to_string(s.cpu)] = s.bytes;
      if (s.ring)  // hardware: what the kernel says it could not keep
        summary["pt_aux"][std::to_string(s.cpu)] = {
            {"records", s.ring->aux_records},  {"truncated", s.ring->truncated},
            {"partial", s.ring->partial},      {"collision", s.ring->collision},
            {"lost_records", s.ring->lost_records}, {"lost_events", s.ring->lost_events},
            {"malformed_records", s.ring->malformed_records}};
    }
  if (auto st = write_file_atomic(*out_dir + "/summary.json", summary.dump(2) + "\n"); !st)
    return fail(kName, st.error());
  if (!flushed) return fail(kName, flushed.error());
  if (opt.has("json")) {
    std::printf("%s\n", summary.dump().c_str());
  } else {
    const auto& s = saver.stats();
    std::fprintf(stderr,
                 "kthost trace: %.1f s, %zu events; %lu holds (%lu failed, host max %.0f us); %lu text records, %s; "
                 "unloads %lu (lost %lu); lost: %lu perf-ring, %lu queue, %lu guard-miss, %lu unguarded (%s)\n",
                 seconds, log.size(), static_cast<unsigned long>(totals.holds),
                 static_cast<unsigned long>(s.guard_failed), totals.host_us_max,
                 static_cast<unsigned long>(text_records), human_bytes(text_bytes).c_str(),
                 static_cast<unsigned long>(s.unloads_seen), static_cast<unsigned long>(s.unloads_lost),
                 static_cast<unsigned long>(log.lost(1)), static_cast<unsigned long>(log.lost(2)),
                 static_cast<unsigned long>(log.lost(3)), static_cast<unsigned long>(log.lost(5)), end_reason.c_str());
  }
  return status;
}

CommandRegistration reg({kName, "follow a running guest: sideband, guard holds and the text store into a directory",
                         run});

}  // namespace
}  // namespace kt::cli
