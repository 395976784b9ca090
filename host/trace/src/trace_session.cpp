#include "kthost/trace/trace_session.h"

#include <sys/statvfs.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "kthost/bundle/bundle.h"
#include "kthost/capture/guard_mirror.h"
#include "kthost/capture/pt_capture.h"
#include "kthost/capture/text_saver.h"
#include "kthost/common/io.h"
#include "kthost/common/pi_mutex.h"
#include "kthost/common/strings.h"
#include "kthost/common/thread_setup.h"
#include "kthost/introspect/kernel_layout.h"
#include "kthost/introspect/page_walker.h"
#include "kthost/pt/kvm_tsc.h"
#include "kthost/pt/requirements.h"
#include "kthost/sideband/channel.h"
#include "kthost/sideband/event_log.h"
#include "kthost/snapshot/snapshot.h"
#include "kthost/trace/guard_responder.h"
#include "kthost/trace/holder_boost.h"
#include "kthost/trace/sideband_reader.h"
#include "kthost/trace/tsc_offset_estimator.h"
#include "kthost_shared.h"
#include "ktproto.h"

namespace kt {

using Clock = std::chrono::steady_clock;

namespace {

// A SCHED_FIFO priority option, 0 (off) .. max.
Result<int> parse_priority(const char* option, const std::string& word, uint64_t max) {
  auto prio = parse_u64(word, 10);
  if (!prio || *prio > max)
    return Error(ErrorCode::InvalidArgument,
                 std::string(option) + " takes 0.." + std::to_string(max) + ", not \"" + word + "\"");
  return static_cast<int>(*prio);
}

}  // namespace

Result<TraceOptions> parse_trace_options(const TraceOptionWords& w) {
  TraceOptions o;
  KT_ASSIGN_OR_RETURN(o.backend, parse_backend_choice(w.backend.value_or("auto")));
  KT_ASSIGN_OR_RETURN(o.pt, parse_pt_choice(w.pt.value_or("auto")));
  KT_ASSIGN_OR_RETURN(o.pt_config, parse_pt_config({w.pt_psb, w.pt_mtc, w.pt_cyc, w.pt_no_tsc}));
  o.guard = !w.no_guard;
  o.ack_word = !w.no_ack_word;
  if (w.guard_nice) {
    const std::string& v = *w.guard_nice;
    bool negative = !v.empty() && v[0] == '-';
    auto magnitude = parse_u64(negative ? v.substr(1) : v, 10);
    if (!magnitude || *magnitude > 20 || (!negative && *magnitude > 19))
      return Error(ErrorCode::InvalidArgument, "--guard-nice takes -20..19, not \"" + v + "\"");
    o.guard_nice = negative ? -static_cast<int>(*magnitude) : static_cast<int>(*magnitude);
  }
  if (w.guard_rt) {
    KT_ASSIGN_OR_RETURN(o.guard_rt, parse_priority("--guard-rt", *w.guard_rt, 99));
  }
  if (w.max_pt) {
    KT_ASSIGN_OR_RETURN(o.max_pt_bytes, parse_byte_size(*w.max_pt, "--max-pt"));
  }
  if (w.min_free) {
    KT_ASSIGN_OR_RETURN(o.min_free_bytes, parse_byte_size(*w.min_free, "--min-free"));
  }
  // The holder's priority stays below the answering threads' (by default one
  // below; none when they run under normal scheduling).
  o.holder_boost = o.guard_rt > 1 ? o.guard_rt - 1 : 0;
  if (w.holder_boost) {
    KT_ASSIGN_OR_RETURN(o.holder_boost, parse_priority("--holder-boost", *w.holder_boost, 98));
    if (o.holder_boost && o.holder_boost >= o.guard_rt)
      return Error(ErrorCode::InvalidArgument,
                   "--holder-boost " + *w.holder_boost + " must be below --guard-rt (" + std::to_string(o.guard_rt) +
                       "): a raised holder would keep the hold-answering threads from running");
  }
  if (w.out_dir.empty()) return Error(ErrorCode::InvalidArgument, "no output directory");
  o.out_dir = w.out_dir;
  return o;
}

std::string TraceProgress::status_line() const {
  char line[200];
  std::snprintf(line, sizeof line, "%6.0fs  events %zu  pokes %zu  holds %lu  saved %s  PT %s  lost %lu", seconds,
                events, text_pokes, static_cast<unsigned long>(holds), human_bytes(text_bytes).c_str(),
                human_bytes(pt_bytes).c_str(), static_cast<unsigned long>(lost));
  return line;
}

namespace {

// Hardware PT stamps the host TSC; the guest's is host * ratio + offset (KVM
// debugfs). Without scaling the offset is exact; the TCG plugin's is bounded
// from the events' arrival.
TscOffsetEstimator make_estimator(const PtCapture* pt, int qemu_pid, const TraceOptions& o) {
  if (!pt) return TscOffsetEstimator::none();
  if (pt->kind() == "software") return TscOffsetEstimator::arrival_bound();
  auto tsc = read_kvm_tsc(qemu_pid);
  if (tsc && !tsc->vcpus.empty() && !tsc->vcpus.front().ratio)
    return TscOffsetEstimator::exact(-tsc->vcpus.front().offset);
  if (o.notice)
    o.notice("no exact guest TSC offset (" + (tsc ? std::string("TSC scaling in use") : tsc.error().message) +
             "): sideband times are aligned by the decoder's candidate windows only");
  return TscOffsetEstimator::none();
}

}  // namespace

// Threads: the SidebandReader's thread answers holds (guard, saver, walker,
// the ack word); the main thread does everything else. saver_mu covers what
// both touch: the saver (and the walker and memory under it), the guard's
// totals and holds.jsonl, and pending_texts. Only the main thread writes the
// bundle: text saved on the reader thread waits in pending_texts.
struct TraceSession::State {
  TraceOptions options;
  TraceTarget target;
  std::unique_ptr<GuestMemory> memory;
  KernelLayout layout;
  std::unique_ptr<PageWalker> walker;
  std::unique_ptr<PtCapture> pt;
  bool pt_on = false;  // started (polled and stopped only then)
  std::unique_ptr<BundleWriter> bundle;
  std::unique_ptr<TextSaver> saver;
  std::optional<GuardResponder> guard;
  std::optional<GuardMirror> mirror;  // ktguard's notices polled from guest RAM (with ack words)
  std::optional<HolderBoost> boost;   // raises a holder's vCPU thread (mirror thread only)
  HolderBoostStats boost_stats;       // copied from boost when the mirror thread ends
  mutable PiMutex saver_mu;  // priority inheritance: the hold threads are SCHED_FIFO
  std::vector<TextRecord> pending_texts;  // under saver_mu
  SidebandView view;                      // the reader's, as of the last step
  TscOffsetEstimator clock;
  EventLog log;
  uint64_t text_records = 0, text_bytes = 0;
  bool have_symbols = false;
  std::string guest_guard = "unknown";
  std::vector<std::string> guard_unheld;  // GUARD_HOOKS: paths ktguard could not hook
  Clock::time_point start, last_flush;
  std::string end_reason;
  bool ended = false, failed = false;
  // Polls the mirror (its own thread; saver_mu). Stopped before the reader.
  std::thread mirror_thread;
  std::atomic<bool> mirror_stop{false};
  bool mirror_error_shown = false;  // under saver_mu
  // The state dump the mirror was last looked for in by symbol (main thread).
  const GuestState* mirror_looked_up_in = nullptr;
  const GuestState* tables_looked_up_in = nullptr;  // the state dump init_top_pgt was looked up in
  std::atomic<bool> priority_error_shown{false};
  // Last, so that it is destroyed first: its thread uses the members above.
  std::unique_ptr<SidebandReader> reader;

  ~State() { stop_mirror(); }
  void stop_mirror() {
    mirror_stop = true;
    if (mirror_thread.joinable()) mirror_thread.join();
  }
  void mirror_loop();
  // First thing on each thread that answers holds: its name and priority.
  void set_up_guard_thread(const char* name) {
    name_this_thread(name);
    if (options.guard_rt > 0)
      if (auto st = set_this_thread_fifo(options.guard_rt); !st && !priority_error_shown.exchange(true))
        notice(st.error().message + ": holds are answered under normal scheduling, behind busy vCPU threads");
    if (!options.guard_nice) return;
    if (auto st = set_this_thread_nice(*options.guard_nice); !st && !priority_error_shown.exchange(true))
      notice(st.error().message + ": holds are answered at the process's priority, behind busy vCPU threads");
  }

  PtCapture::Sink pt_sink() {
    return [this](uint32_t cpu, const uint8_t* data, size_t len) { return bundle->append_pt(cpu, data, len); };
  }
  void end(const std::string& reason, bool error) {
    if (ended) return;
    ended = true;
    failed = error;
    end_reason = reason;
  }
  void notice(const std::string& text) const {
    if (options.notice) options.notice(text);
  }
  LossCounters losses() const {
    std::lock_guard<PiMutex> lock(saver_mu);
    return LossCounters::collect(log, view.stats, saver->stats(), guard ? guard->totals().acks_failed : 0);
  }
  HoldTotals hold_totals() const {
    std::lock_guard<PiMutex> lock(saver_mu);
    return guard ? guard->totals() : HoldTotals{};
  }
  // On the reader thread: a hold, answered at once.
  void answer(const SidebandEvent& ev, const GuardNoticeEvent& n, const SidebandReader::AckSender& ack) {
    std::lock_guard<PiMutex> lock(saver_mu);
    if (mirror && n.ack_addr && !mirror->located()) {
      if (auto st = mirror->locate(n.ack_addr); !st && !mirror_error_shown) {
        mirror_error_shown = true;
        notice(st.error().message + ": holds are answered from the channel only");
      }
    }
    if (mirror) mirror->answered(n.id);
    if (guard) guard->answer(ev, n, ack);
  }
  void handle_batches(std::vector<SidebandBatch> batches);
  void find_mirror_by_symbol();
  void use_kernel_page_tables();
  void write_hold_lines();
  void on_guard_state(const GuardStateEvent& g);
  void on_guard_hooks(const GuardHooksEvent& g);
  void handle(const SidebandEvent& ev, const HostArrival& received);
  void store_pending_texts();
  void once_a_second();
  std::string limit_reached() const;
};

// The bounds of TraceOptions: what was passed, or "".
std::string TraceSession::State::limit_reached() const {
  const uint64_t pt_bytes = pt ? pt->total_bytes() : 0;
  if (options.max_pt_bytes && pt_bytes >= options.max_pt_bytes)
    return "PT reached --max-pt " + human_bytes(options.max_pt_bytes) + " (" + human_bytes(pt_bytes) + ")";
  if (!options.min_free_bytes) return "";
  struct statvfs fs {};
  if (::statvfs(options.out_dir.c_str(), &fs) != 0) return "";  // the bundle's own writes report a missing directory
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < options.min_free_bytes)
    return "the bundle's filesystem (" + options.out_dir + ") has " + human_bytes(free_bytes) +
           " free, under --min-free " + human_bytes(options.min_free_bytes);
  return "";
}

void TraceSession::State::handle_batches(std::vector<SidebandBatch> batches) {
  view = reader->view();
  for (auto& b : batches) {
    for (const auto& ev : b.events) handle(ev, b.received);
    log.append(std::move(b.events));
  }
  use_kernel_page_tables();
  find_mirror_by_symbol();
  store_pending_texts();
}

// The session began on the page tables vCPU 0 had then: often a process's,
// which are freed when it exits (then every copy failed: "PML5 entry ... is
// not present"). Once the guest's symbols are in, and while those tables
// still map the kernel, the walker moves to the kernel's own (init_top_pgt,
// which lives as long as the kernel). Tables that no longer map the kernel
// are left as they are: the session began before the guest finished booting
// (page_tables_still_valid says so).
void TraceSession::State::use_kernel_page_tables() {
  if (!view.state || !view.state->complete || view.state.get() == tables_looked_up_in) return;
  tables_looked_up_in = view.state.get();
  const GuestSymbolRecord* sym = nullptr;
  for (const auto& s : view.state->symbols)
    if (s.name == "init_top_pgt" && s.module.empty()) sym = &s;
  if (!sym) return notice("init_top_pgt is not among the guest's symbols: copies walk the page tables the trace began on");
  std::lock_guard<PiMutex> lock(saver_mu);
  const uint64_t old_root = walker->config().root;
  if (!walker->walk(layout.text_start)) return;
  auto root = walker->virt_to_phys(sym->addr);
  if (!root) return notice("init_top_pgt at " + hex(sym->addr) + ": " + root.error().message);
  if (*root == old_root) return;
  walker->set_root(*root);
  if (auto walked = walker->walk(layout.text_start); !walked) {
    walker->set_root(old_root);
    notice("init_top_pgt at " + hex(*root) + " does not map the kernel (" + walked.error().message +
           "): copies walk the page tables the trace began on");
  }
}

// holds.jsonl's lines, written here and not by the threads that answer holds.
void TraceSession::State::write_hold_lines() {
  if (!guard) return;
  std::string lines;
  {
    std::lock_guard<PiMutex> lock(saver_mu);
    lines = guard->take_lines();
  }
  guard->write_lines(lines);
}

// Once per state dump (and guard session) while the mirror is not known: its
// address from ktguard's pointer, so that the first hold already ends on its
// ack word. Without it (an older ktguard) the first notice's ack word finds it.
void TraceSession::State::find_mirror_by_symbol() {
  if (!mirror || guest_guard != "on" || !view.state || !view.state->complete ||
      view.state.get() == mirror_looked_up_in)
    return;
  mirror_looked_up_in = view.state.get();
  std::lock_guard<PiMutex> lock(saver_mu);
  if (mirror->located()) return;
  // Tables that no longer map the kernel: the session began while the guest
  // booted, and is replaced (page_tables_still_valid); the notice finds it.
  if (!walker->walk(layout.text_start)) return;
  auto base = shared_block_address(view.state->symbols, *walker);
  Status st = base ? mirror->locate_block(*base) : Status(base.error());
  if (!st) notice("ktguard's notice mirror not found by symbol (" + st.error().message + "): the first notice finds it");
}

void TraceSession::State::handle(const SidebandEvent& ev, const HostArrival& received) {
  if (const auto* g = std::get_if<GuardStateEvent>(&ev.body)) on_guard_state(*g);
  if (const auto* g = std::get_if<GuardHooksEvent>(&ev.body)) on_guard_hooks(*g);
  if (!std::holds_alternative<GuardNoticeEvent>(ev.body)) {  // holds were answered on the reader thread
    std::lock_guard<PiMutex> lock(saver_mu);
    saver->on_event(ev);
  }
  if (auto st = bundle->append_event_json(to_json(ev)); !st) end("bundle: " + st.error().message, true);
  if (const auto* hello = std::get_if<HelloEvent>(&ev.body)) {
    clock.on_hello(hello->clock);
    if (!hello->clock.valid && clock.mode() != TscOffsetEstimator::Mode::None)
      notice("the guest's perf clock is not its TSC (cap_user_time_zero 0: the guest marked its TSC unstable); "
             "sideband times are estimated from arrival times (to within the fastest delivery)");
  }
  if (const auto* change = std::get_if<ClockEvent>(&ev.body)) clock.on_clock_change(change->clock);
  clock.on_event(ev.time, received);
  if (std::holds_alternative<StateDumpEvent>(ev.body) && !have_symbols && view.state) {
    have_symbols = true;
    (void)bundle->write_whole_file("kallsyms", kallsyms_text(*view.state));
    (void)bundle->write_whole_file("modules", modules_text(*view.state));
  }
}

// The guest says whether its frees are held. Without ktguard (not loaded, or
// not built for this kernel) unloads are copied best effort from now on, and
// what comes too late is counted as lost.
void TraceSession::State::on_guard_state(const GuardStateEvent& g) {
  const bool on = g.state == KTP_GUARD_ON;
  std::string now = on ? "on" : (g.state == KTP_GUARD_ABSENT ? "absent" : "off") + (": " + g.reason);
  if (now == guest_guard) return;
  guest_guard = now;
  if (!options.guard) return;
  {
    std::lock_guard<PiMutex> lock(saver_mu);
    saver->set_guard(on);
    // A new guard session: ktguard may have been reloaded (a new block, ids from 1).
    if (mirror) mirror->forget();
    mirror_looked_up_in = nullptr;
    if (guard) guard->forget_polled();
  }
  if (!on) notice("the guest's guard is " + now + ": unloaded text is copied best effort, and what is gone is counted");
}

// ktguard says how it attached each freeing path. One it could not hook (a
// kernel without that function) frees its text unheld: those unloads are
// copied best effort, and what is gone is counted.
void TraceSession::State::on_guard_hooks(const GuardHooksEvent& g) {
  if (!options.guard) return;
  std::vector<std::string> unheld;
  {
    std::lock_guard<PiMutex> lock(saver_mu);
    unheld = saver->set_guard_hooks(g.hooks);
  }
  if (g.malformed) notice("the guest's guard hook list had " + std::to_string(g.malformed) + " malformed line(s)");
  if (unheld == guard_unheld) return;
  guard_unheld = unheld;
  for (const auto& path : unheld)
    notice("the guest's guard does not hold " + path + ": that text is copied best effort at unload, and what is gone is counted");
}

// ktguard mirrors every waiting hold in guest RAM: polled here, a hold is
// saved and its ack word stored without waiting for its notice to come
// through ktguest and the channel (which takes a wake-up in the guest and
// a round trip through QEMU: about a millisecond under TCG, all of it spent
// by the holder spinning on its word, in the trace). Every 100 us while holds
// come (within 200 ms of the last), every millisecond otherwise; an
// unchanged block costs one 8-byte read. Not faster: each wake-up is host CPU
// that a TCG guest's vCPU threads would otherwise have.
void TraceSession::State::mirror_loop() {
  auto last_activity = Clock::now() - std::chrono::hours(1);
  auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  while (!mirror_stop) {
    const auto before_sleep = Clock::now();
    const bool busy = before_sleep - last_activity < std::chrono::milliseconds(200);
    std::this_thread::sleep_for(busy ? std::chrono::microseconds(100) : std::chrono::milliseconds(1));
    const auto woke = Clock::now();
    std::lock_guard<PiMutex> lock(saver_mu);
    const MirrorPollTiming timing{us(woke - before_sleep), us(Clock::now() - woke)};
    if (!mirror || !mirror->located() || !guard) {
      if (boost) boost->end_all(Clock::now());
      continue;
    }
    auto got = mirror->poll();
    if (!got) {
      if (!mirror_error_shown) notice("reading ktguard's shared block: " + got.error().message + ": polling stops");
      mirror_error_shown = true;
      mirror->forget();
      if (boost) boost->end_all(Clock::now());
      continue;
    }
    // Raised first: a holder that waits for a host CPU runs at once, and
    // sees its word as soon as it is stored.
    if (boost) {
      for (const auto& m : *got) boost->hold_seen(m.notice.id, m.cpu, Clock::now());
      boost->holds_waiting(mirror->waiting(), Clock::now());
    }
    for (const auto& m : *got) {
      SidebandEvent ev;
      ev.time = m.time_ns;
      ev.cpu = m.cpu;
      ev.body = m.notice;
      guard->answer_polled(ev, m.notice, timing);
    }
    if (!got->empty()) last_activity = Clock::now();
  }
  std::lock_guard<PiMutex> lock(saver_mu);
  if (boost) {
    boost->end_all(Clock::now());
    boost_stats = boost->stats();
  }
}

void TraceSession::State::store_pending_texts() {
  std::vector<TextRecord> texts;
  {
    std::lock_guard<PiMutex> lock(saver_mu);
    texts.swap(pending_texts);
  }
  for (const auto& r : texts) {
    ++text_records;
    text_bytes += r.bytes.size();
    if (auto st = bundle->append_text(r); !st) end("bundle: " + st.error().message, true);
  }
}

// A guest that stopped or crashed, or libvirtd gone, ends the trace cleanly.
void TraceSession::State::once_a_second() {
  if (target.check_alive)
    if (auto alive = target.check_alive(); !alive) return end("guest: " + alive.error().message, true);
  if (auto limit = limit_reached(); !limit.empty()) {
    notice(limit + ": the trace ends here");
    return end(limit, false);
  }
  losses().to_bundle(*bundle);
  if (clock.has_clock()) bundle->set_clock(clock.bundle_clock());
  if (auto st = bundle->flush(); !st) notice(st.error().message);
  write_hold_lines();
}

TraceSession::TraceSession(std::unique_ptr<State> state) : s_(std::move(state)) {}
TraceSession::~TraceSession() = default;

Result<std::unique_ptr<TraceSession>> TraceSession::open(const TraceTarget& target, const TraceOptions& options) {
  if (target.vm.channel.empty()) return Error(ErrorCode::Unsupported, target.label + " has no " KTHOST_PORT_SIDEBAND " channel");
  if (!target.monitor) return Error(ErrorCode::InvalidArgument, "no monitor for " + target.label);
  if (options.backend == BackendChoice::Monitor)
    return Error(ErrorCode::InvalidArgument, "--backend xp is too slow to answer guard holds");
  TraceParts parts;
  // Guest memory and the kernel's page tables, from vCPU 0's CR3.
  KT_ASSIGN_OR_RETURN(parts.memory, open_guest_memory(*target.monitor, target.vm, options.backend));
  KT_ASSIGN_OR_RETURN(CpuRegisters regs, read_registers(*target.monitor, 0));
  KT_ASSIGN_OR_RETURN(parts.layout, discover_kernel_layout(*parts.memory, regs, GuestSymbols{}));
  KT_ASSIGN_OR_RETURN(parts.pt, PtCapture::open(options.pt, target.vm, target.monitor, target.label,
                                                options.out_dir + "/pt-hw", options.pt_config));
  parts.channel_path = target.vm.channel;
  parts.qemu_pid = target.vm.pid;
  return open(std::move(parts), target, options);
}

Result<std::unique_ptr<TraceSession>> TraceSession::open(TraceParts parts, const TraceTarget& target,
                                                         const TraceOptions& options) {
  auto s = std::make_unique<State>();
  s->options = options;
  s->target = target;
  s->memory = std::move(parts.memory);
  s->layout = std::move(parts.layout);
  s->pt = std::move(parts.pt);
  s->walker = std::make_unique<PageWalker>(*s->memory, s->layout.paging);
  // The bundle (docs/BUNDLE.md). Its clock is set when the guest says hello.
  BundleClock clock;
  clock.identity = false;
  KT_ASSIGN_OR_RETURN(s->bundle, BundleWriter::create(options.out_dir, s->pt ? s->pt->cpus() : std::vector<uint32_t>{},
                                                      clock));
  KT_ASSIGN_OR_RETURN(SidebandChannel channel,
                      SidebandChannel::connect(parts.channel_path, std::chrono::seconds(10), options.guard));
  State* st = s.get();
  // Called with saver_mu held, on either thread: the main thread stores it.
  s->saver = std::make_unique<TextSaver>(
      *s->walker,
      [st](const TextRecord& r) {
        st->pending_texts.push_back(r);
        return ok_status();
      },
      options.guard);
  // The ack word: the one store kthost makes into guest RAM. It ends a hold
  // as soon as the text is saved; the channel ack follows regardless.
  if (options.guard && options.ack_word) {
    s->saver->set_ack_word_writer([st](uint64_t gpa, uint64_t value) { return st->memory->write_word(gpa, value); });
    s->mirror.emplace(*s->memory);
    if (options.holder_boost > 0) {
      std::vector<VcpuThread> threads = target.vcpu_threads;
      if (threads.empty() && target.monitor) {
        auto asked = query_vcpu_threads(*target.monitor);
        if (asked) threads = *asked;
        else s->notice("holder boost off: " + asked.error().message);
      }
      s->boost.emplace(std::move(threads), options.holder_boost, options.notice);
      if (!target.real_time_vcpus) s->boost->lower_leftovers();
    }
  }
  if (options.guard) {
    KT_ASSIGN_OR_RETURN(GuardResponder responder,
                        GuardResponder::create(*s->saver, {}, options.out_dir + "/holds.jsonl", options.notice));
    s->guard.emplace(std::move(responder));
  }
  if (s->pt && options.pt_at_open) {
    if (auto started = s->pt->start(); !started) return started.error().with_context("starting PT");
    s->pt_on = true;
  }
  // The initial text: every executable range of the kernel, modules and BPF
  // packs, read now (later changes come through the sideband).
  SnapshotSummary snap;
  auto kcore = kcore_image(*s->walker, s->layout, &snap);
  if (!kcore) return kcore.error().with_context("initial snapshot");
  if (snap.unreadable_pages)
    s->notice(std::to_string(snap.unreadable_pages) + " pages were unmapped during the initial snapshot (zero-filled)");
  if (auto written = s->bundle->write_whole_file("kcore", *kcore); !written)
    return written.error().with_context("initial snapshot");
  s->clock = make_estimator(s->pt.get(), parts.qemu_pid, options);
  s->start = s->last_flush = Clock::now();
  s->reader = SidebandReader::start(std::move(channel), [st](const SidebandEvent& ev, const GuardNoticeEvent& n,
                                                             const SidebandReader::AckSender& ack) {
    st->answer(ev, n, ack);
  }, [st] { st->set_up_guard_thread("kt-sideband"); });
  if (s->mirror)
    s->mirror_thread = std::thread([st] {
      st->set_up_guard_thread("kt-guard-mirror");
      st->mirror_loop();
    });
  return std::unique_ptr<TraceSession>(new TraceSession(std::move(s)));
}

bool TraceSession::step(std::chrono::milliseconds wait) {
  State& s = *s_;
  if (s.ended) return false;
  auto batches = s.reader->take(wait);
  if (!batches) {
    s.end("channel: " + batches.error().message, true);
    return false;
  }
  s.handle_batches(std::move(*batches));
  if (s.ended) return false;
  if (s.pt_on)
    if (auto st = s.pt->poll(s.pt_sink()); !st) {
      s.end("PT: " + st.error().message, true);
      return false;
    }
  auto now = Clock::now();
  if (now - s.last_flush >= std::chrono::seconds(1)) {
    s.last_flush = now;
    s.once_a_second();
  }
  return !s.ended;
}

bool TraceSession::ready() const { return s_->view.handshake_done && s_->view.state && s_->view.state->complete; }

Status TraceSession::page_tables_still_valid() {
  std::lock_guard<PiMutex> lock(s_->saver_mu);
  KT_TRY(s_->walker->walk(s_->layout.text_start));
  return ok_status();
}

Status TraceSession::start_pt() {
  State& s = *s_;
  if (!s.pt || s.pt_on) return ok_status();
  if (auto started = s.pt->start(); !started) return started.error().with_context("starting PT");
  s.pt_on = true;
  s.start = Clock::now();
  return ok_status();
}

bool TraceSession::wait_ready(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() >= deadline || !step()) return false;
  }
  return true;
}

Result<TraceSummary> TraceSession::finish(const std::string& reason) {
  State& s = *s_;
  s.end(reason, false);
  TraceSummary sum;
  sum.seconds = std::chrono::duration<double>(Clock::now() - s.start).count();
  if (s.pt_on)
    if (auto st = s.pt->stop(s.pt_sink()); !st) {
      s.notice("PT: " + st.error().message);
      s.failed = true;
    }
  // Holds are answered until here; then what the reader read goes in too.
  s.stop_mirror();
  s.reader->stop();
  if (auto rest = s.reader->take(std::chrono::milliseconds(0)); rest) s.handle_batches(std::move(*rest));
  sum.losses = s.losses();
  // Software PT: a vCPU whose stream the plugin did not confirm ended may
  // miss its last packets (those it held for open frames, and its TIP.PGD).
  if (s.pt)
    for (uint32_t cpu : s.pt->unconfirmed_cpus()) {
      ++sum.losses.pt_unconfirmed;
      s.bundle->set_loss("pt_unconfirmed_cpu" + std::to_string(cpu), 1);
      s.notice("PT: vCPU " + std::to_string(cpu) + " did not confirm the end of its stream; its last packets may be "
               "missing (counted as loss pt_unconfirmed_cpu" + std::to_string(cpu) + ")");
    }
  sum.losses.to_bundle(*s.bundle);
  // Hardware PT: what the kernel said it could not keep, per vCPU, for perf
  // (kthost export writes them as PERF_RECORD_AUX flags).
  if (s.pt)
    for (const auto& c : s.pt->stats())
      if (c.ring) {
        std::string cpu = "_cpu" + std::to_string(c.cpu);
        s.bundle->set_loss("aux_truncated" + cpu, c.ring->truncated);
        s.bundle->set_loss("aux_partial" + cpu, c.ring->partial);
        s.bundle->set_loss("aux_collision" + cpu, c.ring->collision);
      }
  if (s.clock.has_clock()) s.bundle->set_clock(s.clock.bundle_clock());
  auto closed = s.bundle->close();
  if (s.guard) s.guard->flush();  // the reader has stopped: no lock needed
  sum.end_reason = s.end_reason;
  sum.guard = s.options.guard;
  sum.guest_guard = s.guest_guard;
  sum.guard_unheld = s.guard_unheld;
  sum.events = s.log.size();
  sum.text_pokes = s.log.count("text_poke");
  sum.ksymbols = s.log.count("ksymbol");
  sum.module_loads = s.log.count("module_load");
  sum.module_unloads = s.log.count("module_unload");
  sum.holds = s.hold_totals();
  sum.saver = s.saver->stats();
  sum.text_records = s.text_records;
  sum.text_bytes = s.text_bytes;
  sum.pt_source = pt_source();
  sum.pt_bytes = s.pt ? s.pt->total_bytes() : 0;
  if (s.pt && s.pt->kind() == "software") sum.extra["pt_start_wait_ms"] = s.pt->start_wait_ms();
  if (s.boost) {
    const HolderBoostStats& b = s.boost_stats;
    sum.extra["holder_boost"] = {{"priority", s.options.holder_boost}, {"boosts", b.boosts},
                                 {"timeouts", b.timeouts}, {"errors", b.errors},
                                 {"no_thread", b.no_thread}, {"leftovers", b.leftovers}, {"max_ms", b.max_ms}};
  }
  if (!s.saver->lost_unloads().empty()) sum.extra["lost_unload_examples"] = s.saver->lost_unloads();
  if (s.pt && s.pt->kind() == "hardware") {
    // Guest TSC = host TSC * ratio + offset per vCPU: what maps the guest's
    // sideband times onto the host-TSC times in hardware PT.
    if (auto tsc = read_kvm_tsc(s.target.vm.pid); tsc) {
      for (const auto& v : tsc->vcpus)
        sum.extra["kvm_tsc"][std::to_string(v.vcpu)] = {
            {"offset", v.offset}, {"ratio", v.ratio ? *v.ratio : 0}, {"frac_bits", v.frac_bits}};
    } else {
      sum.extra["kvm_tsc_error"] = tsc.error().message;
    }
  }
  if (s.pt)
    for (const auto& c : s.pt->stats()) {
      sum.extra["pt_bytes_per_cpu"][std::to_string(c.cpu)] = c.bytes;
      if (c.ring)  // hardware: what the kernel says it could not keep
        sum.extra["pt_aux"][std::to_string(c.cpu)] = {
            {"records", c.ring->aux_records}, {"truncated", c.ring->truncated},
            {"partial", c.ring->partial},     {"collision", c.ring->collision},
            {"lost_records", c.ring->lost_records}, {"lost_events", c.ring->lost_events},
            {"malformed_records", c.ring->malformed_records}};
    }
  KT_TRY(write_file_atomic(s.options.out_dir + "/summary.json", sum.to_json().dump(2) + "\n"));
  if (!closed) return closed.take_error();
  return sum;
}

TraceProgress TraceSession::progress() const {
  const State& s = *s_;
  TraceProgress p;
  p.seconds = std::chrono::duration<double>(Clock::now() - s.start).count();
  p.events = s.log.size();
  p.text_pokes = s.log.count("text_poke");
  p.holds = s.hold_totals().holds;
  p.text_bytes = s.text_bytes;
  p.pt_bytes = s.pt ? s.pt->total_bytes() : 0;
  p.lost = s.losses().total();
  return p;
}

const std::string& TraceSession::end_reason() const { return s_->end_reason; }

void TraceSession::explain_end(const std::string& cause) {
  if (s_->ended && !cause.empty()) s_->end_reason = cause + " (" + s_->end_reason + ")";
}
bool TraceSession::failed() const { return s_->failed; }
std::string TraceSession::describe() const {
  const State& s = *s_;
  std::string pt = s.pt ? s.pt->kind() + " on " + std::to_string(s.pt->cpus().size()) + " vCPUs" : "none";
  std::string guard = !s.options.guard ? "off (best effort)" : s.options.ack_word ? "on" : "on (channel acks only)";
  return s.target.label + ", memory " + memory_backend() + ", PT " + pt + ", guard " + guard + ", writing " +
         s.options.out_dir;
}

std::string TraceSession::memory_backend() const { return s_->memory ? s_->memory->backend_name() : "none"; }
std::string TraceSession::pt_source() const { return s_->pt ? s_->pt->kind() : "none"; }

}  // namespace kt
