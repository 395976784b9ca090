// The parts of TraceSession (host/trace), each alone: the guard responder
// (copy, ack word, channel ack, holds.jsonl), the TSC offset estimator, the
// loss counters, option parsing, thread setup, the default bundle name, the summary line.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "kthost/common/io.h"
#include "kthost/common/thread_setup.h"
#include "kthost/introspect/guest_memory.h"
#include "kthost/trace/guard_responder.h"
#include "kthost/trace/guest_workload.h"
#include "kthost/trace/loss_counters.h"
#include "kthost/trace/trace_session.h"
#include "kthost/trace/trace_summary.h"
#include "kthost/trace/tsc_offset_estimator.h"
#include "fake_guest.h"
#include "ktproto.h"

namespace kt {
namespace {

using namespace test;

TEST(GuardResponder, SavesStoresTheWordAcksAndLogsEachHold) {
  FakeGuest g;
  PageWalker walker(g.mem, g.cfg);
  std::vector<TextRecord> saved;
  TextSaver saver(walker, [&](const TextRecord& r) { saved.push_back(r); return ok_status(); }, true);
  saver.set_ack_word_writer([&](uint64_t gpa, uint64_t value) { return g.mem.write_word(gpa, value); });
  std::vector<std::pair<uint64_t, uint32_t>> acks;
  std::string holds = temp_path("holds");
  auto r = GuardResponder::create(
      saver, [&](uint64_t id, uint32_t status) { acks.emplace_back(id, status); return ok_status(); }, holds);
  ASSERT_TRUE(r) << r.error().message;
  HoldRecord h = r->answer(event(5, GuardNoticeEvent{42, kBase + 16, kBase + 80, 1, kAckWord}),
                           GuardNoticeEvent{42, kBase + 16, kBase + 80, 1, kAckWord});
  EXPECT_EQ(h.status, 0u) << h.error;
  EXPECT_TRUE(h.word_acked);
  uint64_t word = 0;
  ASSERT_TRUE(g.mem.read(kAckWord, &word, 8));
  EXPECT_EQ(word, 42u);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0], std::make_pair(uint64_t{42}, uint32_t{0}));
  ASSERT_EQ(saved.size(), 1u);
  ASSERT_EQ(saved[0].bytes.size(), 64u);
  EXPECT_EQ(saved[0].bytes[0], static_cast<uint8_t>(16 * 13 + 1));  // the guest's own byte at +16
  EXPECT_EQ(r->totals().holds, 1u);
  // Answering does not write the file: the line waits for the caller's writer.
  auto before = read_file(holds);
  ASSERT_TRUE(before);
  EXPECT_TRUE(before->empty()) << *before;
  r->flush();
  EXPECT_TRUE(r->take_lines().empty());
  auto text = read_file(holds);
  ASSERT_TRUE(text);
  auto line = nlohmann::json::parse(*text);
  EXPECT_EQ(line["id"], 42);
  EXPECT_EQ(line["bytes"], 64);
  EXPECT_EQ(line["word_acked"], true);
  ::unlink(holds.c_str());
}

TEST(GuardResponder, AFailedAckIsCountedAndAnUnreadableRangeIsAckedAsNotSaved) {
  FakeGuest g;
  PageWalker walker(g.mem, g.cfg);
  TextSaver saver(walker, [](const TextRecord&) { return ok_status(); }, true);
  std::vector<uint32_t> statuses;
  std::vector<std::string> notices;
  auto r = GuardResponder::create(
      saver,
      [&](uint64_t, uint32_t status) {
        statuses.push_back(status);
        return Status(Error(ErrorCode::Io, "channel closed"));
      },
      "", [&](const std::string& n) { notices.push_back(n); });
  ASSERT_TRUE(r);
  // Unmapped: one page past the text.
  GuardNoticeEvent n{7, kBase + 4096, kBase + 8192, 1, 0};
  HoldRecord h = r->answer(event(1, n), n);
  EXPECT_EQ(h.status, 1u);
  EXPECT_FALSE(h.error.empty());
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0], 1u);
  EXPECT_EQ(r->totals().acks_failed, 1u);
  EXPECT_EQ(r->totals().holds, 1u);
}

TEST(TscOffsetEstimator, ArrivalBoundKeepsTheSmallestAndRestartsAtHello) {
  GuestClock clock;
  clock.valid = true;
  clock.time_zero = 0;
  clock.time_mult = 1u << 10;  // perf ns = tsc * 2^10 >> 10 = tsc
  clock.time_shift = 10;
  auto e = TscOffsetEstimator::arrival_bound();
  EXPECT_FALSE(e.offset());
  e.on_event(1000, {5000, 0});  // no clock yet: ignored
  EXPECT_FALSE(e.offset());
  EXPECT_FALSE(e.has_clock());
  e.on_hello(clock);
  e.on_event(1000, {5000, 0});
  e.on_event(2000, {5500, 0});  // bound 3500
  e.on_event(3000, {9000, 0});  // bound 6000: not smaller
  ASSERT_TRUE(e.offset());
  EXPECT_EQ(*e.offset(), 3500);
  EXPECT_EQ(e.bundle_clock().pt_offset, 3500);
  EXPECT_FALSE(e.bundle_clock().identity);
  EXPECT_TRUE(e.has_clock());
  EXPECT_FALSE(e.estimated());
  EXPECT_FALSE(e.bundle_clock().estimated);
  e.on_hello(clock);  // a new guest clock session
  EXPECT_FALSE(e.offset());
}

TEST(TscOffsetEstimator, ExactIgnoresArrivalsAndHellos) {
  auto e = TscOffsetEstimator::exact(-777);
  GuestClock clock;
  clock.valid = true;
  clock.time_mult = 1;
  e.on_hello(clock);
  e.on_event(10, {1, 0});
  ASSERT_TRUE(e.offset());
  EXPECT_EQ(*e.offset(), -777);
  EXPECT_FALSE(TscOffsetEstimator::none().offset());
}

// A guest that marked its TSC unstable sends no TSC parameters. With a host
// TSC of 2.5 ticks/ns, events stamped p (perf ns) truly at host raw ns
// p + 1'000'000 and received 7 us (or later) after: the estimated clock puts
// each event within the fastest delivery (7 us = 17500 ticks) of the truth.
TEST(TscOffsetEstimator, WithoutAGuestTscClockTheClockIsEstimatedFromArrivals) {
  auto e = TscOffsetEstimator::arrival_bound();
  GuestClock unstable;  // valid false
  e.on_hello(unstable);
  const uint64_t raw_at_perf0 = 1'000'000, tsc_at_raw0 = 40'000'000'000ull;
  auto host_at = [&](uint64_t raw) { return HostArrival{tsc_at_raw0 + raw * 5 / 2, raw}; };
  uint64_t delays[] = {9000, 7000, 120000, 7000, 30000, 8000};
  uint64_t perf = 5'000'000;
  for (uint64_t d : delays) {
    e.on_event(perf, host_at(perf + raw_at_perf0 + d));
    EXPECT_FALSE(e.offset());  // no guest TSC to offset
    perf += 20'000'000;
  }
  ASSERT_TRUE(e.has_clock());
  EXPECT_TRUE(e.estimated());
  BundleClock c = e.bundle_clock();
  EXPECT_TRUE(c.estimated);
  EXPECT_FALSE(c.identity);
  for (uint64_t p : {5'000'000ull, 47'000'000ull, 105'000'000ull, 400'000'000ull}) {
    const uint64_t truth = host_at(p + raw_at_perf0).tsc;
    const auto got = static_cast<int64_t>(c.to_pt(p) - truth);
    EXPECT_GE(got, 17500 - 50) << p;  // late by the fastest delivery, never early
    EXPECT_LE(got, 17500 + 50) << p;
  }
  // The manifest keeps it, and says where it came from.
  BundleManifest m;
  m.clock = c;
  m.cpus = {};
  auto json = manifest_to_json(m);
  EXPECT_NE(json.find("\"host_arrival\""), std::string::npos);
  auto back = parse_manifest(json, "manifest.json");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_TRUE(back->clock.estimated);
  EXPECT_EQ(back->clock.to_pt(47'000'000), c.to_pt(47'000'000));
}

TEST(TscOffsetEstimator, ATscClockThatAppearsLaterReplacesTheEstimate) {
  auto e = TscOffsetEstimator::arrival_bound();
  e.on_hello(GuestClock{});
  e.on_event(1000, {100, 2000});
  e.on_event(90'000'000, {300'000'000, 90'002'000});
  EXPECT_TRUE(e.estimated());
  GuestClock tsc;
  tsc.valid = true;
  tsc.time_mult = 1u << 10;
  tsc.time_shift = 10;
  e.on_clock_change(tsc);
  e.on_event(100'000'000, {100'000'700, 100'000'800});
  EXPECT_FALSE(e.estimated());
  ASSERT_TRUE(e.offset());
  EXPECT_EQ(*e.offset(), 700);
  e.on_clock_change(GuestClock{});  // gone again: the last TSC parameters stay
  EXPECT_FALSE(e.estimated());
  EXPECT_EQ(e.bundle_clock().time_mult, 1u << 10);
}

TEST(TscOffsetEstimator, WithoutAGuestTscClockAShortTraceHasNoRateAndNoClock) {
  auto e = TscOffsetEstimator::arrival_bound();
  e.on_hello(GuestClock{});
  e.on_event(1000, {100, 2000});
  e.on_event(2000, {2600, 3000});  // 1 us apart: too short to know the rate
  EXPECT_FALSE(e.has_clock());
  EXPECT_FALSE(TscOffsetEstimator::none().has_clock());
}

TEST(LossCounters, GuardTotalsSinceLoadCountOnlyWhatTheTraceMissed) {
  EventLog log;
  auto total = [](uint64_t t, uint64_t n) { return event(t, LostEvent{KTP_LOST_GUARD_UNGUARDED, EventLog::kLostTotalSinceLoad, n}); };
  auto live = [](uint64_t t, uint64_t n) { return event(t, LostEvent{KTP_LOST_GUARD_UNGUARDED, 0, n}); };
  std::vector<SidebandEvent> events;
  events.push_back(total(1, 40));  // frees at boot, before this trace
  log.append(std::move(events));
  EXPECT_EQ(log.lost(KTP_LOST_GUARD_UNGUARDED), 0u);
  EXPECT_EQ(log.lost_since_load(KTP_LOST_GUARD_UNGUARDED), 40u);
  events.push_back(live(2, 3));    // during the trace
  events.push_back(total(3, 50));  // the helper restarted: 10 more, 3 of them reported live
  events.push_back(total(4, 50));  // a reconnect with nothing new
  log.append(std::move(events));
  EXPECT_EQ(log.lost(KTP_LOST_GUARD_UNGUARDED), 10u);
  events.push_back(total(5, 2));   // ktguard loaded again: its counters restarted
  events.push_back(total(6, 6));   // 4 more since, none reported live
  log.append(std::move(events));
  EXPECT_EQ(log.lost(KTP_LOST_GUARD_UNGUARDED), 14u);
  EXPECT_EQ(log.lost_since_load(KTP_LOST_GUARD_UNGUARDED), 50u);
  TextSaverStats saver;
  auto l = LossCounters::collect(log, DecoderStats{}, saver, 0);
  EXPECT_EQ(l.unguarded, 14u);
  EXPECT_EQ(l.unguarded_since_load, 50u);
}

TEST(LossCounters, EveryKindFromTheProtocolAndTheHostIsCountedAndNamed) {
  EventLog log(3);  // a cap of 3 events: the rest are dropped, and counted
  std::vector<SidebandEvent> events;
  events.push_back(event(1, LostEvent{KTP_LOST_PERF_RING, 0, 5}));
  events.push_back(event(2, LostEvent{KTP_LOST_QUEUE, 0, 2}));
  events.push_back(event(3, LostEvent{KTP_LOST_GUARD_TIMEOUT, 0, 1}));
  events.push_back(event(4, LostEvent{KTP_LOST_MODULE_RACE, 0, 1}));
  log.append(std::move(events));
  DecoderStats dec;
  dec.bad_crc = 3;
  dec.frames_missing = 4;
  TextSaverStats saver;
  saver.unloads_lost = 2;
  saver.guard_failed = 1;
  auto l = LossCounters::collect(log, dec, saver, 6);
  EXPECT_EQ(l.perf_ring, 5u);
  EXPECT_EQ(l.queue, 2u);
  EXPECT_EQ(l.guard_timeout, 1u);
  EXPECT_EQ(l.events_dropped, log.dropped());
  EXPECT_GE(l.events_dropped, 1u);
  EXPECT_EQ(l.acks_failed, 6u);
  EXPECT_EQ(l.sideband_errors, 3u);
  EXPECT_EQ(l.frames_missing, 4u);
  auto j = l.to_json();
  EXPECT_EQ(j["acks_failed"], 6);
  EXPECT_EQ(j["events_dropped"], l.events_dropped);
  EXPECT_EQ(j["lost_perf_ring"], 5);
  EXPECT_EQ(j["lost_total"], l.total());
  std::string d = l.describe();
  for (const char* part : {"5 perf-ring", "2 queued", "6 acks unsent", "3 corrupt sideband", "4 missing sideband",
                           "past the log's cap"})
    EXPECT_NE(d.find(part), std::string::npos) << part << " in: " << d;
  EXPECT_EQ(LossCounters{}.describe(), "no losses");
  EXPECT_EQ(LossCounters{}.total(), 0u);
}

TEST(TraceSummary, OneLineNamesSidebandErrors) {
  TraceSummary s;
  s.end_reason = "SIGINT";
  s.losses.sideband_errors = 860;
  std::string line = s.one_line();
  EXPECT_NE(line.find("860 corrupt sideband frames"), std::string::npos) << line;
  EXPECT_NE(line.find("(SIGINT)"), std::string::npos) << line;
  auto j = s.to_json();
  EXPECT_EQ(j["decode_errors"], 860);
  EXPECT_EQ(j["end"], "SIGINT");
}

TEST(TraceOptions, ParsedWithEachBadValueNamed) {
  TraceOptionWords w;
  w.out_dir = "/tmp/x";
  auto o = parse_trace_options(w);
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->pt, PtChoice::Auto);
  EXPECT_TRUE(o->guard);
  EXPECT_TRUE(o->ack_word);
  EXPECT_EQ(o->guard_rt, 2);
  EXPECT_EQ(o->holder_boost, 1);  // below the answering threads
  w.pt = "hardware";
  w.pt_psb = "3";
  w.pt_mtc = "off";
  w.no_guard = true;
  o = parse_trace_options(w);
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->pt, PtChoice::Hardware);
  EXPECT_EQ(o->pt_config.psb_period, 3u);
  EXPECT_FALSE(o->pt_config.mtc);
  EXPECT_FALSE(o->guard);
  w.pt_cyc = "16";
  o = parse_trace_options(w);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("--pt-cyc takes 0..15"), std::string::npos) << o.error().message;
  w.pt_cyc.reset();
  w.pt = "laser";
  o = parse_trace_options(w);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("'laser'"), std::string::npos);
  w.pt.reset();
  w.backend = "xp";
  EXPECT_TRUE(parse_trace_options(w));  // parsed; TraceSession::open refuses it as too slow
  w.guard_rt = "0";
  o = parse_trace_options(w);
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->guard_rt, 0);
  EXPECT_EQ(o->holder_boost, 0);  // no room below normal scheduling
  w.guard_rt = "5";
  w.holder_boost = "5";
  o = parse_trace_options(w);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("--holder-boost 5 must be below --guard-rt (5)"), std::string::npos)
      << o.error().message;
  w.holder_boost = "3";
  ASSERT_TRUE(parse_trace_options(w));
  EXPECT_EQ(parse_trace_options(w)->holder_boost, 3);
  w.holder_boost = "0";
  EXPECT_EQ(parse_trace_options(w)->holder_boost, 0);
  w.holder_boost = "99";
  o = parse_trace_options(w);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("--holder-boost takes 0..98"), std::string::npos) << o.error().message;
  w.holder_boost.reset();
  w.guard_rt = "0";
  w.guard_rt = "100";
  o = parse_trace_options(w);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("--guard-rt takes 0..99, not \"100\""), std::string::npos) << o.error().message;
  w.guard_rt.reset();
  EXPECT_FALSE(parse_trace_options(w)->guard_nice);
  for (const char* good : {"-20", "0", "19", "-5"}) {
    w.guard_nice = good;
    o = parse_trace_options(w);
    ASSERT_TRUE(o) << good;
    EXPECT_EQ(o->guard_nice, std::optional<int>(std::stoi(good)));
  }
  for (const char* bad : {"-21", "20", "x", "", "-", "5x"}) {
    w.guard_nice = bad;
    o = parse_trace_options(w);
    ASSERT_FALSE(o) << bad;
    EXPECT_NE(o.error().message.find("--guard-nice takes -20..19"), std::string::npos) << o.error().message;
  }
  w.guard_nice.reset();
  o = parse_trace_options(w);
  EXPECT_EQ(o->max_pt_bytes, 0u);              // no limit
  EXPECT_EQ(o->min_free_bytes, uint64_t{1} << 30);  // 1 GiB
  w.max_pt = "4G";
  w.min_free = "0";
  o = parse_trace_options(w);
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->max_pt_bytes, uint64_t{4} << 30);
  EXPECT_EQ(o->min_free_bytes, 0u);
  w.max_pt = "4Q";
  o = parse_trace_options(w);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("--max-pt takes a size in bytes"), std::string::npos) << o.error().message;
  w.max_pt.reset();
  w.min_free = "-1";
  o = parse_trace_options(w);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("--min-free takes a size in bytes"), std::string::npos) << o.error().message;
}

TEST(ThreadSetup, NamesAndNicesOnlyTheCallingThread) {
  const int process_nice = getpriority(PRIO_PROCESS, 0);
  int seen_nice = 100;
  std::string seen_name;
  std::thread t([&] {
    name_this_thread("kt-test-thread-long-name");
    ASSERT_TRUE(set_this_thread_nice(process_nice + 3));
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    seen_nice = getpriority(PRIO_PROCESS, tid);
    std::ifstream comm("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::getline(comm, seen_name);
  });
  t.join();
  EXPECT_EQ(seen_nice, process_nice + 3);
  EXPECT_EQ(seen_name, "kt-test-thread-");  // the kernel keeps 15 characters
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), process_nice);  // this thread's is unchanged
}

// Root may run a thread under SCHED_FIFO; anyone else gets an error that
// names the priority. Either way only the calling thread changes.
TEST(ThreadSetup, RealTimeOnlyForTheCallingThreadOrAnErrorNamingThePriority) {
  int seen_policy = -1, seen_priority = -1;
  Status st = ok_status();
  std::thread t([&] {
    st = set_this_thread_fifo(1);
    sched_param p{};
    pthread_getschedparam(pthread_self(), &seen_policy, &p);
    seen_priority = p.sched_priority;
  });
  t.join();
  if (geteuid() == 0) {
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_EQ(seen_policy, SCHED_FIFO);
    EXPECT_EQ(seen_priority, 1);
  } else {
    ASSERT_FALSE(st);
    EXPECT_NE(st.error().message.find("SCHED_FIFO at priority 1"), std::string::npos) << st.error().message;
    EXPECT_EQ(seen_policy, SCHED_OTHER);
  }
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);  // this thread's is unchanged
}

TEST(TraceOptions, DefaultBundleNameIsSafeAndDated) {
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 9, tm.tm_min = 5, tm.tm_sec = 7, tm.tm_isdst = -1;
  auto when = std::chrono::system_clock::from_time_t(std::mktime(&tm));
  EXPECT_EQ(default_trace_dir("vm1", when), "vm1-20261130-090507");
  EXPECT_EQ(default_trace_dir("../etc/x y", when), "trace.._etc_x_y-20261130-090507");
  EXPECT_EQ(default_trace_dir("", when), "trace-20261130-090507");
}

TEST(TraceProgress, StatusLineShowsEveryCounter) {
  TraceProgress p;
  p.seconds = 12, p.events = 340, p.text_pokes = 26, p.holds = 4, p.lost = 3;
  std::string line = p.status_line();
  for (const char* part : {"12s", "events 340", "pokes 26", "holds 4", "lost 3"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in: " << line;
}

}  // namespace
}  // namespace kt
