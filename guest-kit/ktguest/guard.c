/* The relay between ktguard (/dev/ktguard) and the host.
 *
 * ktguard holds a freeing context until its notice is acked, but only while
 * a reader has /dev/ktguard open. So the device is open exactly while a host
 * session is up whose HELLO_ACK said KTP_ACK_GUARD_ENABLED: with no host (or
 * a host that does not answer notices) nothing is held, and frees are
 * counted by ktguard as "unguarded". Closing the device ends every pending
 * hold at once ("reader gone"), so a host that vanishes costs the guest no
 * more than the time ktguest needs to notice the hangup.
 *
 * Notices go out in the urgent lane (ahead of queued events); acks are
 * written back as they arrive. Once a second ktguard's counters are read and
 * any new misses or unguarded frees are queued as LOST frames, which wait in
 * the live lane for a host if none is connected.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ktguard_uapi.h"
#include "ktguest.h"

#define STATS_PATH "/sys/module/ktguard/parameters/stats"
#define HOOKS_PATH "/sys/module/ktguard/parameters/hooks"

/* Where a hold's time goes, as ktguest sees it (both in microseconds, over
 * the last TIMING_SAMPLES holds): wake = the notice's kernel time to ktguest
 * reading it; relay = ktguest reading it to the host's ack arriving back. The
 * rest of a hold (ack written to the holder running) is ktguard's. */
#define TIMING_SAMPLES 4096
#define PENDING_IDS 1024 /* notice ids increase; more than ktguard can hold at once */
struct timing {
  uint32_t v[TIMING_SAMPLES];
  uint64_t n;
};

static struct {
  struct timing wake, relay;
  struct {
    uint64_t id, read_ns;
  } pending[PENDING_IDS];
  int fd;
  int warned_absent;
  /* ktguard counters already reported as LOST, or counted before this
   * helper's first reading. */
  int baseline_taken;
  uint64_t reported_missed, reported_unguarded;
} G = {.fd = -1};

int ktg_guard_open(void) { return G.fd >= 0; }

static void timing_add(struct timing *t, uint64_t ns) {
  uint64_t us = ns / 1000;
  t->v[t->n++ % TIMING_SAMPLES] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static int timing_json(char *out, size_t size, const char *name, const struct timing *t) {
  static uint32_t sorted[TIMING_SAMPLES];
  size_t k = t->n < TIMING_SAMPLES ? (size_t)t->n : TIMING_SAMPLES;
  if (k == 0) return snprintf(out, size, "\"%s\":{\"n\":0}", name);
  memcpy(sorted, t->v, k * sizeof sorted[0]);
  qsort(sorted, k, sizeof sorted[0], cmp_u32);
  return snprintf(out, size, "\"%s\":{\"n\":%zu,\"median\":%u,\"p99\":%u,\"max\":%u}", name, k,
                  sorted[(k - 1) / 2], sorted[(k * 99 + 99) / 100 - 1], sorted[k - 1]);
}

int ktg_guard_timing_json(char *out, size_t size) {
  int a = timing_json(out, size, "guard_wake_us", &G.wake);
  if (a < 0 || (size_t)a + 1 >= size) return a;
  out[a] = ',';
  int b = timing_json(out + a + 1, size - (size_t)a - 1, "guard_relay_us", &G.relay);
  return b < 0 ? b : a + 1 + b;
}

/* Tells the host whether frees are held (GUARD_STATE), ahead of queued events. */
static void send_state(uint32_t state, const char *reason) {
  struct ktp_guard_state m = {ktg_perf_now(), state, {reason, (uint16_t)strnlen(reason, KTP_MAX_STRING)}};
  ktg_enqueue(KTG_LANE_URGENT, ktp_encode_guard_state(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
}

/* Tells the host how ktguard attached each path that frees text
 * (GUARD_HOOKS): a path it could not hook is not held, and the host copies
 * what it frees best effort. An unreadable parameter is sent as empty, which
 * the host reads as "nothing known held". */
static void send_hooks(void) {
  char text[KTP_MAX_STRING + 1];
  long n = ktg_read_file(HOOKS_PATH, text, sizeof text);
  if (n < 0) {
    ktg_log("read %s: %s; the host treats every hooked path as unheld", HOOKS_PATH, strerror(errno));
    n = 0;
  }
  for (long at = 0; at < n;) {
    const char *line = text + at, *nl = memchr(line, '\n', (size_t)(n - at));
    int len = (int)(nl ? nl - line : n - at);
    if (len > 5 && memcmp(line + len - 5, " none", 5) == 0)
      ktg_log("ktguard could not hook %.*s: what it frees is copied best effort", len - 5, line);
    at += len + 1;
  }
  struct ktp_guard_hooks m = {ktg_perf_now(), {text, (uint16_t)n}};
  ktg_enqueue(KTG_LANE_URGENT, ktp_encode_guard_hooks(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
}

void ktg_guard_start(void) {
  if (G.fd >= 0) return;
  G.fd = open(KTGUARD_DEVICE, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (G.fd < 0) {
    char why[160];
    snprintf(why, sizeof why, "open %s: %s (is ktguard loaded? it is built per kernel)", KTGUARD_DEVICE,
             strerror(errno));
    if (!G.warned_absent) ktg_log("%s; frees of kernel text are not held (best effort)", why);
    G.warned_absent = 1;
    send_state(KTP_GUARD_ABSENT, why);
    return;
  }
  send_state(KTP_GUARD_ON, "");
  send_hooks();
  G.warned_absent = 0;
  G.wake.n = G.relay.n = 0; /* timings describe this session's host */
  /* A freeing context now waits on this process: run it ahead of ordinary
   * tasks, so that a busy guest does not add a scheduler slice to every hold.
   * The loop only reacts to events (the state dump is done by now), so it
   * cannot hog a CPU; the kernel's RT throttling bounds it anyway. */
  struct sched_param sp = {.sched_priority = 10};
  int rt = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
  ktg_log("guard on: %s open, frees of kernel text wait for the host%s", KTGUARD_DEVICE,
          rt ? " (SCHED_FIFO 10)" : "");
}

void ktg_guard_stop(const char *why) {
  if (G.fd < 0) return;
  close(G.fd); /* ktguard ends every pending hold ("reader gone") */
  G.fd = -1;
  struct sched_param sp = {.sched_priority = 0};
  sched_setscheduler(0, SCHED_OTHER, &sp);
  ktg_log("guard off (%s)", why);
}

int ktg_guard_poll_fd(void) { return G.fd; }

void ktg_guard_read(void) {
  if (G.fd < 0) return;
  struct ktguard_notice buf[16];
  for (;;) {
    ssize_t n = read(G.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      ktg_log("read %s: %s", KTGUARD_DEVICE, n < 0 ? strerror(errno) : "end of file");
      ktg_guard_stop("device read failed");
      send_state(KTP_GUARD_OFF, "reading /dev/ktguard failed: frees are no longer held");
      return;
    }
    size_t count = (size_t)n / sizeof buf[0];
    uint64_t now = ktg_perf_now();
    for (size_t i = 0; i < count; ++i) {
      const struct ktguard_notice *k = &buf[i];
      if (now >= k->time_ns) timing_add(&G.wake, now - k->time_ns);
      G.pending[k->id % PENDING_IDS].id = k->id;
      G.pending[k->id % PENDING_IDS].read_ns = now;
      struct ktp_guard_notice m = {k->time_ns, k->cpu, k->id, k->start, k->end, k->kind, k->ack_addr};
      g_ctr.guard_notices++;
      ktg_debug("guard notice %llu [%#llx, %#llx) kind %u", (unsigned long long)k->id,
                (unsigned long long)k->start, (unsigned long long)k->end, k->kind);
      ktg_enqueue(KTG_LANE_URGENT, ktp_encode_guard_notice(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
    }
    if ((size_t)n < sizeof buf) return;
  }
}

void ktg_guard_ack(const struct ktp_guard_ack *ack) {
  g_ctr.guard_acks++;
  if (G.fd < 0) return; /* the hold already ended when the device closed */
  if (G.pending[ack->id % PENDING_IDS].id == ack->id) {
    uint64_t now = ktg_perf_now(), then = G.pending[ack->id % PENDING_IDS].read_ns;
    if (now >= then) timing_add(&G.relay, now - then);
  }
  struct ktguard_ack a = {ack->id, ack->status, 0};
  ssize_t w;
  do {
    w = write(G.fd, &a, sizeof a);
  } while (w < 0 && errno == EINTR);
  if (w != (ssize_t)sizeof a) ktg_log("write %s: %s", KTGUARD_DEVICE, w < 0 ? strerror(errno) : "short write");
}

/* "name=value" lines; returns 0 when `name` was found. */
static int stat_value(const char *text, const char *name, uint64_t *out) {
  size_t len = strlen(name);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, name, len) == 0 && p[len] == '=') {
      *out = strtoull(p + len + 1, NULL, 10);
      return 0;
    }
  }
  return -1;
}

static void queue_lost(uint32_t kind, uint32_t record_type, uint64_t count) {
  struct ktp_lost m = {ktg_perf_now(), UINT32_MAX, kind, record_type, count};
  ktg_enqueue(KTG_LANE_LIVE, ktp_encode_lost(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
}

/* ktguard's totals since it loaded: misses (holds without an ack) and
 * unguarded frees. Returns -1 when ktguard is not there. */
static int read_totals(uint64_t *missed, uint64_t *unguarded) {
  char text[1024];
  if (ktg_read_file(STATS_PATH, text, sizeof text) < 0) return -1;
  uint64_t timeouts = 0, gone = 0, overflows = 0, errors = 0;
  if (stat_value(text, "timeouts", &timeouts) || stat_value(text, "reader_gone", &gone) ||
      stat_value(text, "overflows", &overflows) || stat_value(text, "host_errors", &errors) ||
      stat_value(text, "unguarded", unguarded))
    return -1;
  *missed = timeouts + gone + overflows + errors;
  return 0;
}

/* At a session's start: the totals since load, which are also where this
 * session's new losses are counted from. */
void ktg_guard_session_totals(void) {
  uint64_t missed, unguarded;
  if (read_totals(&missed, &unguarded) != 0) return;
  queue_lost(KTP_LOST_GUARD_TIMEOUT, KTP_LOST_TOTAL_SINCE_LOAD, missed);
  queue_lost(KTP_LOST_GUARD_UNGUARDED, KTP_LOST_TOTAL_SINCE_LOAD, unguarded);
  G.baseline_taken = 1;
  G.reported_missed = missed;
  G.reported_unguarded = unguarded;
}

void ktg_guard_check(void) {
  uint64_t missed, unguarded;
  if (read_totals(&missed, &unguarded) != 0) return;
  g_ctr.guard_missed = missed;
  g_ctr.guard_unguarded = unguarded;
  /* New losses are a session's own: what ktguard counts while no host is
   * connected (frees at boot, as a distribution's udev loads modules and
   * frees their init text; the holds a dead host left) only moves the
   * baseline. Every session start sends the totals since load, and a host
   * whose helper restarted or reconnected mid-trace sees the frees in the gap
   * as the growth of those totals (EventLog::lost). */
  if (!G.baseline_taken || !ktg_port_connected()) {
    G.baseline_taken = 1;
    G.reported_missed = missed;
    G.reported_unguarded = unguarded;
    return;
  }
  if (missed > G.reported_missed) queue_lost(KTP_LOST_GUARD_TIMEOUT, 0, missed - G.reported_missed);
  if (unguarded > G.reported_unguarded) queue_lost(KTP_LOST_GUARD_UNGUARDED, 0, unguarded - G.reported_unguarded);
  G.reported_missed = missed;
  G.reported_unguarded = unguarded;
}
