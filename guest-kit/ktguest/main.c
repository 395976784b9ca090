/* ktguest: the guest helper daemon of kthost.
 *
 * Forwards every change to guest kernel text (perf KSYMBOL, BPF_EVENT,
 * TEXT_POKE; module load/unload) and a state dump per host connection over
 * the org.kthost.0 virtio-serial port, in the ktproto wire format. It never
 * blocks the guest: the port is non-blocking, frames wait in a bounded
 * queue, and when the host is absent or slow the oldest events are dropped
 * and counted, while the perf rings keep being drained.
 *
 * usage: ktguest [--port PATH | --fd N] [--ring-kb N] [--queue-kb N]
 *                [--stats PATH] [--module-poll] [-v]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ktguest.h"

#define TICK_MS 100
#define TICKS_PER_SECOND (1000 / TICK_MS)

struct ktg_options g_opt = {NULL, -1, 1u << 20, 8u << 20, "/run/ktguest.stats", 0};
int g_verbose;
struct ktg_counters g_ctr;

static void vlog(const char *fmt, va_list ap) {
  char line[1024];
  vsnprintf(line, sizeof line, fmt, ap);
  fprintf(stderr, "ktguest: %s\n", line);
}

void ktg_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(fmt, ap);
  va_end(ap);
}

void ktg_debug(const char *fmt, ...) {
  if (!g_verbose) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(fmt, ap);
  va_end(ap);
}

long long ktg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long ktg_read_file(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || size == 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  size_t len = 0;
  while (len < size - 1) {
    ssize_t n = read(fd, buf + len, size - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fd);
  buf[len] = '\0';
  return (long)len;
}

/* Rewritten whole each second (write + rename), so a reader never sees half. */
static void write_stats(void) {
  if (!g_opt.stats_path || !*g_opt.stats_path) return;
  char tmp[512], text[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", g_opt.stats_path);
  const struct ktg_counters *c = &g_ctr;
  int n = snprintf(text, sizeof text,
                   "{\"frames_sent\":%llu,\"bytes_sent\":%llu,\"writes\":%llu,\"perf_records\":%llu,\"text_pokes\":%llu,"
                   "\"text_poke_frames\":%llu,\"ksymbol\":%llu,\"bpf_event\":%llu,\"lost_records\":%llu,"
                   "\"lost_events\":%llu,\"queue_dropped\":%llu,\"queue_bytes\":%zu,\"corrupt_rings\":%llu,"
                   "\"other_records\":%llu,\"module_loads\":%llu,\"module_unloads\":%llu,\"module_races\":%llu,"
                   "\"module_polling\":%d,\"module_poll_changes\":%llu,\"connected\":%d,\"connections\":%llu,"
                   "\"dumps\":%llu,\"host_errors\":%llu,\"encode_errors\":%llu,\"guard_open\":%d,\"guard_notices\":%llu,"
                   "\"guard_acks\":%llu,\"guard_missed\":%llu,\"guard_unguarded\":%llu,\"task_switches\":%llu,"
                   "\"task_switch_frames\":%llu,\"task_switches_unsent\":%llu,",
                   (unsigned long long)c->frames_sent, (unsigned long long)c->bytes_sent, (unsigned long long)c->writes,
                   (unsigned long long)c->perf_records, (unsigned long long)c->text_pokes,
                   (unsigned long long)c->text_poke_frames, (unsigned long long)c->ksymbols,
                   (unsigned long long)c->bpf_events, (unsigned long long)c->lost_records,
                   (unsigned long long)c->lost_events, (unsigned long long)c->queue_dropped, ktg_queue_live_bytes(),
                   (unsigned long long)c->corrupt_rings, (unsigned long long)c->other_records,
                   (unsigned long long)c->module_loads, (unsigned long long)c->module_unloads,
                   (unsigned long long)c->module_races, ktg_modules_polling(),
                   (unsigned long long)c->module_poll_changes, ktg_port_connected(),
                   (unsigned long long)c->connections, (unsigned long long)c->dumps,
                   (unsigned long long)c->host_errors, (unsigned long long)c->encode_errors, ktg_guard_open(),
                   (unsigned long long)c->guard_notices, (unsigned long long)c->guard_acks,
                   (unsigned long long)c->guard_missed, (unsigned long long)c->guard_unguarded,
                   (unsigned long long)c->task_switches, (unsigned long long)c->task_switch_frames,
                   (unsigned long long)c->task_switches_unsent);
  if (n < 0 || (size_t)n >= sizeof text) return;
  struct ktg_symcache_stats sc = ktg_symcache_stats();
  int m = snprintf(text + n, sizeof text - (size_t)n,
                   "\"symbols_ready\":%d,\"symbols\":%u,\"symbols_stale\":%d,\"kallsyms_reads\":%llu,"
                   "\"kallsyms_reads_in_session\":%llu,\"kallsyms_refreshes_abandoned\":%llu,\"kallsyms_read_ms\":%llu,",
                   sc.ready, sc.symbols, sc.stale, (unsigned long long)sc.reads,
                   (unsigned long long)sc.reads_in_session, (unsigned long long)sc.refreshes_abandoned,
                   (unsigned long long)sc.last_read_ms);
  if (m < 0 || (size_t)(n + m) >= sizeof text) return;
  n += m;
  int t = ktg_guard_timing_json(text + n, sizeof text - (size_t)n);
  if (t < 0 || (size_t)(n + t) + 2 >= sizeof text) return;
  n += t;
  text[n++] = '}';
  text[n++] = '\n';
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, text, (size_t)n);
  close(fd);
  if (w == n) rename(tmp, g_opt.stats_path);
}

static void every_second(void) {
  ktg_perf_check_lost();
  ktg_perf_hotplug();
  ktg_modules_poll();
  ktg_clock_check();
  ktg_guard_check();
  ktg_symcache_every_second();
  if (ktg_port_connected() && ktg_dump_complete()) ktg_queue_heartbeat_due();
  write_stats();
}

static int parse_kb(const char *s, size_t *out) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || v == 0 || v > (1ull << 22)) return -1;
  *out = (size_t)v * 1024;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: ktguest [--port PATH | --fd N] [--ring-kb N] [--queue-kb N] [--stats PATH]\n"
          "               [--module-poll] [-v]\n"
          "  --port PATH    use this file instead of searching /sys/class/virtio-ports for org.kthost.0\n"
          "  --fd N         use an inherited descriptor; exits when its peer closes it\n"
          "  --ring-kb N    perf ring per CPU (rounded up to a power of two pages; default 1024)\n"
          "  --queue-kb N   bound of the event queue while the host is slow or absent (default 8192)\n"
          "  --stats PATH   live counters as JSON, rewritten every second (default /run/ktguest.stats; \"\" for none)\n"
          "  --module-poll  find module loads by polling /proc/modules instead of tracepoints\n"
          "  -v             debug logging\n");
}

static int parse_args(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-v") == 0) g_verbose = 1;
    else if (strcmp(a, "--module-poll") == 0) g_opt.module_poll = 1;
    else if (strcmp(a, "--port") == 0 && v) g_opt.port_path = argv[++i];
    else if (strcmp(a, "--stats") == 0 && v) g_opt.stats_path = argv[++i];
    else if (strcmp(a, "--fd") == 0 && v) {
      char *end;
      long fd = strtol(argv[++i], &end, 10);
      if (*end || fd < 0 || fd > 1 << 20) return -1;
      g_opt.fixed_fd = (int)fd;
    } else if (strcmp(a, "--ring-kb") == 0 && v) {
      if (parse_kb(argv[++i], &g_opt.ring_bytes) != 0) return -1;
    } else if (strcmp(a, "--queue-kb") == 0 && v) {
      if (parse_kb(argv[++i], &g_opt.queue_bytes) != 0) return -1;
    } else return -1;
  }
  /* perf wants 2^n data pages. */
  size_t page = (size_t)sysconf(_SC_PAGESIZE), ring = page;
  while (ring < g_opt.ring_bytes) ring *= 2;
  g_opt.ring_bytes = ring;
  return 0;
}

int main(int argc, char **argv) {
  if (parse_args(argc, argv) != 0) {
    usage();
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (ktg_queue_selftest() != 0) {
    ktg_log("frame restamp does not match the codec; refusing to send corrupt frames");
    return 1;
  }
  ktg_queue_init(g_opt.queue_bytes);
  ktg_clock_init();
  if (ktg_perf_init() != 0) ktg_log("no perf ring could be opened: only module and state frames will flow");
  ktg_clock_check();
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  struct itimerspec its = {{0, TICK_MS * 1000000L}, {0, TICK_MS * 1000000L}};
  if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL) != 0) {
    ktg_log("timerfd: %s", strerror(errno));
    return 1;
  }
  ktg_symcache_init();
  ktg_log("started (ring %zu KiB per CPU, queue %zu KiB)", g_opt.ring_bytes / 1024, g_opt.queue_bytes / 1024);
  ktg_port_tick();
  unsigned ticks = 0;
  static struct pollfd fds[KTG_MAX_CPUS + 3];
  for (;;) {
    int n = 0, port_at = -1, guard_at = -1;
    fds[n++] = (struct pollfd){tfd, POLLIN, 0};
    if (ktg_guard_poll_fd() >= 0) {
      guard_at = n;
      fds[n++] = (struct pollfd){ktg_guard_poll_fd(), POLLIN, 0};
    }
    short ev;
    int pfd = ktg_port_poll_fd(&ev);
    if (pfd >= 0) {
      port_at = n;
      fds[n++] = (struct pollfd){pfd, ev, 0};
    }
    n += ktg_perf_pollfds(fds + n, (int)(sizeof fds / sizeof *fds) - n);
    /* While kallsyms is read or a dump is built, poll only to interleave with it. */
    int busy = ktg_symcache_busy() || ktg_dump_busy();
    if (poll(fds, (nfds_t)n, busy ? 0 : -1) < 0 && errno != EINTR) {
      ktg_log("poll: %s", strerror(errno));
      sleep(1);
      continue;
    }
    /* Guard notices first: a kernel context is waiting on each. */
    if (guard_at >= 0 && fds[guard_at].revents) {
      ktg_guard_read();
      ktg_port_flush();
    }
    ktg_perf_drain();
    if (fds[0].revents & POLLIN) {
      uint64_t expirations = 0;
      if (read(tfd, &expirations, sizeof expirations) == sizeof expirations) {
        ktg_port_tick();
        ticks += (unsigned)expirations;
        if (ticks >= TICKS_PER_SECOND) {
          ticks = 0;
          every_second();
        }
      }
    }
    if (port_at >= 0 && fds[port_at].revents) ktg_port_event(fds[port_at].revents);
    if (ktg_symcache_busy()) {
      ktg_symcache_step();
      ktg_perf_drain();
    }
    if (ktg_dump_busy()) {
      ktg_dump_step();
      ktg_perf_drain();
    }
    ktg_port_flush();
  }
}
