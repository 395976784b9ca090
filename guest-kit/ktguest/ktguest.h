/* ktguest: the guest helper daemon. Shared declarations of its parts.
 *
 *   main.c     options, the poll loop, timers, logging, the stats file
 *   port.c     the virtio-serial port: finding it, host (dis)connects, writes
 *   queue.c    the bounded frame queue and the send order
 *   perf.c     per-CPU perf rings: open, drain, parse, CPU hotplug
 *   modules.c  module load/unload: tracepoints via perf, or /proc/modules polls
 *   state.c    the state dump (symbols, modules, BPF programs, CPUs)
 *   symcache.c /proc/kallsyms, read while no host is connected, kept as frames
 *   clock.c    perf clock parameters, "perf clock now", kernel identity
 *
 * Single-threaded: everything runs from the poll loop, so nothing here locks.
 */
#ifndef KTGUEST_H
#define KTGUEST_H

#include <stddef.h>
#include <stdint.h>

#include "ktproto.h"

struct pollfd;
struct perf_event_mmap_page;

#define KTG_MAX_CPUS 1024
#define KTG_MODNAME 64 /* MODULE_NAME_LEN is 56 */

struct ktg_options {
  const char *port_path; /* NULL: search /sys/class/virtio-ports */
  int fixed_fd;          /* >= 0 with --fd */
  size_t ring_bytes;     /* per CPU data area, a power of two pages */
  size_t queue_bytes;    /* live-event queue budget */
  const char *stats_path;
  int module_poll; /* force the /proc/modules fallback */
};
extern struct ktg_options g_opt;
extern int g_verbose;

/* Live counters; HEARTBEAT and the stats file report them. */
struct ktg_counters {
  uint64_t frames_sent;
  uint64_t bytes_sent;
  uint64_t writes; /* write() calls on the port: frames go out in batches */
  uint64_t perf_records;
  uint64_t text_pokes;       /* TEXT_POKE records read */
  uint64_t text_poke_frames; /* > text_pokes when a poke is split into KTP_MAX_BLOB chunks */
  uint64_t ksymbols;
  uint64_t bpf_events;
  uint64_t task_switches;       /* context-switch out-records read */
  uint64_t task_switch_frames;  /* TASK_SWITCHES frames sent */
  uint64_t task_switches_unsent; /* read while no host was in session: not sent */
  uint64_t lost_records; /* PERF_RECORD_LOST totals */
  uint64_t lost_events;  /* PERF_RECORD_LOST records themselves */
  uint64_t queue_dropped;
  uint64_t corrupt_rings; /* resyncs after an impossible record size */
  uint64_t other_records;
  uint64_t module_loads, module_unloads, module_races, module_poll_changes;
  uint64_t connections, dumps, host_errors, encode_errors;
  uint64_t guard_notices, guard_acks, guard_missed, guard_unguarded;
};
extern struct ktg_counters g_ctr;

void ktg_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ktg_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
long long ktg_now_ms(void); /* CLOCK_MONOTONIC */
/* Reads a small text file whole (NUL-terminated); returns its length or -1. */
long ktg_read_file(const char *path, char *buf, size_t size);

/* ---- queue.c ---- */
enum ktg_lane {
  KTG_LANE_DUMP, /* the current connection's state dump: never dropped */
  KTG_LANE_LIVE, /* events: bounded, the oldest dropped first */
  KTG_LANE_URGENT /* guard notices: sent next, after HELLO; never dropped while connected
                     (ktguard bounds them: one per pending hold) */
};
/* A scratch buffer of KTP_MAX_FRAME for the encoders. */
uint8_t *ktg_scratch(void);
/* Queues the frame of size n (a ktp_encode_* result) in ktg_scratch(); a
 * negative n is an encoder error, logged and counted. The seq written by the
 * encoder is replaced when the frame is sent. */
void ktg_enqueue(enum ktg_lane lane, long n);
void ktg_queue_init(size_t live_budget);
int ktg_queue_selftest(void);
/* A new connection: restart seq at 0, drop a partly sent frame. */
void ktg_queue_new_session(void);
/* The host is gone: the partly sent frame and the dump are dropped. */
void ktg_queue_disconnect(void);
/* Something to write now (dump frames wait until the dump is complete). */
int ktg_queue_pending(void);
/* Writes what the fd takes; returns 0, or -1 on a write error (errno set). */
int ktg_queue_flush(int fd, int dump_complete);
void ktg_queue_heartbeat_due(void);
size_t ktg_queue_live_bytes(void);

/* ---- port.c ---- */
void ktg_port_tick(void);             /* every timer tick: open, detect connects */
int ktg_port_poll_fd(short *events);  /* fd to poll (-1: none) and its events */
void ktg_port_event(short revents);
void ktg_port_flush(void);
int ktg_port_connected(void);

/* ---- guard.c ---- */
void ktg_guard_start(void); /* the host answers notices: open /dev/ktguard */
void ktg_guard_stop(const char *why);
int ktg_guard_open(void);
int ktg_guard_poll_fd(void); /* -1 while closed */
void ktg_guard_read(void);   /* notices -> urgent lane */
void ktg_guard_ack(const struct ktp_guard_ack *ack);
void ktg_guard_check(void);  /* 1 s timer: new misses -> LOST frames */
/* "guard_wake_us":{...},"guard_relay_us":{...}: where hold time goes. */
int ktg_guard_timing_json(char *out, size_t size);
void ktg_guard_session_totals(void); /* session start: totals since ktguard loaded */

/* ---- perf.c ---- */
int ktg_perf_init(void);
void ktg_perf_hotplug(void);
/* Appends ring fds to fds (POLLIN); returns how many. */
int ktg_perf_pollfds(struct pollfd *fds, int max);
void ktg_perf_drain(void);
/* Reports losses the kernel counted but has not yet written as PERF_RECORD_LOST. */
void ktg_perf_check_lost(void);
/* The first ring's mmap page: NULL while no ring is open. */
const volatile struct perf_event_mmap_page *ktg_perf_first_page(void);
/* Online CPUs that have a ring, ascending; returns the count. */
uint32_t ktg_perf_cpus(uint32_t *out, uint32_t max);
/* Reads /sys/devices/system/cpu/online into a bitmap of KTG_MAX_CPUS. */
int ktg_online_cpus(uint8_t *online);

/* ---- modules.c ---- */
struct ktg_module {
  char name[KTG_MODNAME];
  uint64_t text_addr, text_size, core_addr, core_size;
};
/* Tracepoint ids for module_load/module_free: -1 when unavailable. */
int ktg_modules_init(long long *load_id, long long *free_id);
/* A PERF_RECORD_SAMPLE's raw tracepoint data. */
void ktg_modules_sample(uint64_t time, uint32_t cpu, const uint8_t *raw, uint32_t raw_len);
void ktg_modules_poll(void); /* the fallback, from the 1 s timer */
int ktg_modules_polling(void);
/* Re-reads every module; returns the table and its size. */
const struct ktg_module *ktg_modules_rescan(size_t *count);

/* Encoded frames kept for later sending (a dump being built, the symbol cache). */
struct ktg_held {
  uint8_t *data;
  uint32_t len;
};
struct ktg_held_list {
  struct ktg_held *frames;
  size_t count, cap;
};
/* Appends a copy of the frame of size n in ktg_scratch(); a negative n is an
 * encoder error, logged and counted. Out of memory, the frame is not kept. */
void ktg_held_add(struct ktg_held_list *l, long n);
/* Queues every frame on `lane`, in order (the list is unchanged). */
void ktg_held_enqueue(const struct ktg_held_list *l, enum ktg_lane lane);
void ktg_held_clear(struct ktg_held_list *l); /* frees the frames, keeps the array */
void ktg_held_free(struct ktg_held_list *l);

/* ---- symcache.c ---- */
struct ktg_symcache_stats {
  uint64_t reads;               /* complete reads of /proc/kallsyms */
  uint64_t reads_in_session;    /* of them, reads that ran while a host was connected */
  uint64_t refreshes_abandoned; /* refreshes given up for a session (it got the older read) */
  uint64_t open_failures;
  uint64_t last_read_ms;
  uint32_t symbols;
  int ready, stale;
};
void ktg_symcache_init(void);            /* starts the first read */
int ktg_symcache_step(void);             /* a bounded slice of a read; 1 while more remains */
int ktg_symcache_busy(void);             /* a read is under way */
int ktg_symcache_ready(void);            /* a complete read is held */
void ktg_symcache_host_arrived(void);    /* connect or session: a refresh in progress gives way */
void ktg_symcache_module_changed(void);  /* marks the cache stale */
void ktg_symcache_every_second(void);    /* refreshes a stale cache while no host is connected */
/* The last complete read; *symbols: how many symbols its frames hold. */
const struct ktg_held_list *ktg_symcache_frames(uint32_t *symbols);
struct ktg_symcache_stats ktg_symcache_stats(void);

/* ---- state.c ---- */
void ktg_dump_start(int reason);
void ktg_dump_abort(void);
int ktg_dump_busy(void);
int ktg_dump_complete(void);
/* Does a bounded slice of the dump; returns 1 while more remains. */
int ktg_dump_step(void);

/* ---- clock.c ---- */
int ktg_clock_init(void);
/* The perf clock parameters from the first ring's mmap page. */
int ktg_clock_read(struct ktp_clock *out);
/* The perf clock now (ns, the clock of record timestamps). */
uint64_t ktg_perf_now(void);
/* From the 1 s timer: queues KTP_CLOCK when the parameters changed. */
void ktg_clock_check(void);
/* Encodes HELLO into ktg_scratch(); returns the ktp_encode result. */
long ktg_encode_hello(void);

#endif
