/* Per-CPU perf sideband rings.
 *
 * Each online CPU gets one software dummy event with ksymbol, bpf_event,
 * text_poke and context_switch (side-band records are delivered only to events of the CPU that
 * made the change, so one system-wide event per CPU is required), and, when
 * the module tracepoints exist, two tracepoint events whose samples are
 * redirected into the same ring (PERF_EVENT_IOC_SET_OUTPUT): one ring per
 * CPU, one order per CPU. Context switches go out in batches (TASK_SWITCHES,
 * only the out-records: the host needs whose stack each switch leaves for),
 * and only while a host is in session.
 * The default perf clock is kept so record times
 * match the mmap page's time_zero conversion.
 *
 * Everything read from a ring is untrusted: a record size that cannot be
 * right (too small, unaligned, beyond data_head) drops that ring's contents
 * and is counted, rather than trusted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ktguest.h"

#define SWITCH_BATCH_MS 200
#define SAMPLE_ID_SIZE 16 /* sample_id_all with TIME|CPU: u64 time; u32 cpu, res */

struct ring {
  int cpu;
  int fd;
  int tp_fd[2];
  uint8_t *base;
  size_t map_len;
  uint8_t *data;
  uint64_t size; /* power of two */
  uint8_t *rec;  /* the staged next record (perf_event_header.size is a u16) */
  int lost_readable;      /* the events were opened with PERF_FORMAT_LOST */
  uint64_t lost_records;  /* sum of the ring's PERF_RECORD_LOST counts */
  uint64_t lost_reported; /* reported to the host: never below lost_records */
  /* Switches read but not yet sent: pairs (ns after sw_time, next tid). */
  uint32_t sw[KTP_MAX_SWITCH_WORDS];
  uint32_t sw_words;
  uint64_t sw_time;
  uint32_t sw_cpu;
  long long sw_since_ms; /* when the batch began (ktg_now_ms) */
};

static struct ring *rings[KTG_MAX_CPUS];
static long long tp_ids[2] = {-1, -1};
static size_t page_size;

static int perf_open(struct perf_event_attr *attr, int cpu, int group) {
  return (int)syscall(SYS_perf_event_open, attr, -1, cpu, group, PERF_FLAG_FD_CLOEXEC);
}

static void ring_close(struct ring *r) {
  for (int i = 0; i < 2; ++i)
    if (r->tp_fd[i] >= 0) close(r->tp_fd[i]);
  if (r->base) munmap(r->base, r->map_len);
  if (r->fd >= 0) close(r->fd);
  free(r->rec);
  free(r);
}

static struct ring *ring_open(int cpu) {
  struct ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->cpu = cpu;
  r->rec = malloc(1u << 16);
  if (!r->rec) {
    free(r);
    return NULL;
  }
  r->tp_fd[0] = r->tp_fd[1] = -1;
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_DUMMY;
  a.sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
  a.sample_id_all = 1;
  a.ksymbol = 1;
  a.bpf_event = 1;
  a.text_poke = 1;
  a.context_switch = 1;
  /* Wake up on a storm well before the ring fills; a lone record waits for
   * the 100 ms timer instead of costing a wakeup each. */
  a.watermark = 1;
  a.wakeup_watermark = (uint32_t)(g_opt.ring_bytes / 16);
  /* The kernel writes PERF_RECORD_LOST only when the next record fits, so
   * losses at the end of a burst sit in the kernel until something else
   * happens on that CPU; read() with PERF_FORMAT_LOST (6.0+) gives them. */
  a.read_format = PERF_FORMAT_LOST;
  r->fd = perf_open(&a, cpu, -1);
  r->lost_readable = r->fd >= 0;
  if (r->fd < 0 && errno == EINVAL) {
    a.read_format = 0;
    r->fd = perf_open(&a, cpu, -1);
  }
  if (r->fd < 0) {
    ktg_log("perf_event_open(dummy, cpu %d): %s", cpu, strerror(errno));
    free(r->rec);
    free(r);
    return NULL;
  }
  r->size = g_opt.ring_bytes;
  r->map_len = page_size + r->size;
  void *m = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (m == MAP_FAILED) {
    ktg_log("mmap perf ring of cpu %d (%zu KiB): %s", cpu, r->size / 1024, strerror(errno));
    r->base = NULL;
    ring_close(r);
    return NULL;
  }
  r->base = m;
  struct perf_event_mmap_page *pg = m;
  uint64_t off = pg->data_offset ? pg->data_offset : page_size;
  if (pg->data_size && pg->data_size <= r->size && off + pg->data_size <= r->map_len) r->size = pg->data_size;
  r->data = r->base + off;
  for (int i = 0; i < 2; ++i) {
    if (tp_ids[i] < 0) continue;
    struct perf_event_attr t;
    memset(&t, 0, sizeof t);
    t.size = sizeof t;
    t.type = PERF_TYPE_TRACEPOINT;
    t.config = (uint64_t)tp_ids[i];
    t.sample_period = 1;
    t.sample_type = PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
    t.sample_id_all = 1;
    /* Wake ktguest on every module event, not at the ring's watermark: the
     * module's sysfs ranges must be read before a quick rmmod removes them. */
    t.wakeup_events = 1;
    t.disabled = 1; /* enabled once it writes into the ring */
    t.read_format = r->lost_readable ? PERF_FORMAT_LOST : 0;
    r->tp_fd[i] = perf_open(&t, cpu, -1);
    if (r->tp_fd[i] < 0 || ioctl(r->tp_fd[i], PERF_EVENT_IOC_SET_OUTPUT, r->fd) != 0 ||
        ioctl(r->tp_fd[i], PERF_EVENT_IOC_ENABLE, 0) != 0) {
      ktg_log("module tracepoint event on cpu %d: %s", cpu, strerror(errno));
      if (r->tp_fd[i] >= 0) close(r->tp_fd[i]);
      r->tp_fd[i] = -1;
    }
  }
  return r;
}

int ktg_perf_init(void) {
  page_size = (size_t)sysconf(_SC_PAGESIZE);
  if (ktg_modules_init(&tp_ids[0], &tp_ids[1]) != 0) ktg_log("module tracepoints unavailable: polling /proc/modules");
  ktg_perf_hotplug();
  return ktg_perf_first_page() ? 0 : -1;
}

void ktg_perf_hotplug(void) {
  static uint8_t online[KTG_MAX_CPUS];
  if (ktg_online_cpus(online) != 0) return;
  for (int cpu = 0; cpu < KTG_MAX_CPUS; ++cpu) {
    if (online[cpu] && !rings[cpu]) {
      rings[cpu] = ring_open(cpu);
      if (rings[cpu]) ktg_debug("cpu %d: ring open", cpu);
    } else if (!online[cpu] && rings[cpu]) {
      /* Events of an offline CPU stay off when it returns: read what is
       * there, then open afresh when it comes back. */
      ktg_perf_drain();
      ktg_perf_check_lost();
      ring_close(rings[cpu]);
      rings[cpu] = NULL;
      ktg_log("cpu %d went offline: ring closed", cpu);
    }
  }
}

int ktg_perf_pollfds(struct pollfd *fds, int max) {
  int n = 0;
  for (int cpu = 0; cpu < KTG_MAX_CPUS && n < max; ++cpu) {
    if (!rings[cpu]) continue;
    fds[n].fd = rings[cpu]->fd;
    fds[n].events = POLLIN;
    fds[n].revents = 0;
    ++n;
  }
  return n;
}

const volatile struct perf_event_mmap_page *ktg_perf_first_page(void) {
  for (int cpu = 0; cpu < KTG_MAX_CPUS; ++cpu)
    if (rings[cpu]) return (const volatile struct perf_event_mmap_page *)rings[cpu]->base;
  return NULL;
}

uint32_t ktg_perf_cpus(uint32_t *out, uint32_t max) {
  uint32_t n = 0;
  for (int cpu = 0; cpu < KTG_MAX_CPUS && n < max; ++cpu)
    if (rings[cpu]) out[n++] = (uint32_t)cpu;
  return n;
}

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint16_t rd16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

static void lost_frame(uint64_t time, uint32_t cpu, uint64_t count) {
  struct ktp_lost m = {time, cpu, KTP_LOST_PERF_RING, 0, count};
  g_ctr.lost_records += count;
  ktg_enqueue(KTG_LANE_LIVE, ktp_encode_lost(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
}

/* Both counts only grow and a PERF_RECORD_LOST never exceeds what the events
 * counted before it, so the host is told max(records, counted) in total:
 * losses the kernel still holds go out now, and the record that reports them
 * later adds only what is new. */
static void report_lost(struct ring *r, uint64_t time, uint64_t total) {
  if (total <= r->lost_reported) return;
  uint64_t delta = total - r->lost_reported;
  r->lost_reported = total;
  lost_frame(time, (uint32_t)r->cpu, delta);
}

static uint64_t event_lost(int fd, int *ok) {
  uint64_t v[2];
  if (fd < 0) return 0;
  if (read(fd, v, sizeof v) != (ssize_t)sizeof v) {
    *ok = 0;
    return 0;
  }
  return v[1];
}

void ktg_perf_check_lost(void) {
  for (int cpu = 0; cpu < KTG_MAX_CPUS; ++cpu) {
    struct ring *r = rings[cpu];
    if (!r || !r->lost_readable) continue;
    int ok = 1;
    uint64_t total = event_lost(r->fd, &ok) + event_lost(r->tp_fd[0], &ok) + event_lost(r->tp_fd[1], &ok);
    if (!ok) continue;
    if (total > r->lost_reported)
      ktg_log("cpu %d: perf ring lost %llu records not yet reported by the kernel", r->cpu,
              (unsigned long long)(total - r->lost_reported));
    report_lost(r, ktg_perf_now(), total);
  }
}

/* A poke longer than KTP_MAX_BLOB (the kernel reports a whole new ftrace
 * trampoline as one poke) goes out as consecutive chunks: bytes [off, off+n)
 * at addr+off changed from old[off..] to new[off..], which is the same fact. */
static void text_poke(uint64_t time, uint32_t cpu, uint64_t addr, const uint8_t *old, uint16_t old_len,
                      const uint8_t *new_bytes, uint16_t new_len) {
  uint32_t total = old_len > new_len ? old_len : new_len;
  uint32_t off = 0;
  do {
    struct ktp_text_poke m = {time, cpu, addr + off, 0, old + off, 0, new_bytes + off};
    if (off < old_len) m.old_len = (uint16_t)(old_len - off > KTP_MAX_BLOB ? KTP_MAX_BLOB : old_len - off);
    if (off < new_len) m.new_len = (uint16_t)(new_len - off > KTP_MAX_BLOB ? KTP_MAX_BLOB : new_len - off);
    ktg_enqueue(KTG_LANE_LIVE, ktp_encode_text_poke(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
    g_ctr.text_poke_frames++;
    off += KTP_MAX_BLOB;
  } while (off < total);
}

static void flush_switches(struct ring *r) {
  if (r->sw_words == 0) return;
  struct ktp_task_switches m = {r->sw_time, r->sw_cpu, r->sw_words, r->sw};
  ktg_enqueue(KTG_LANE_LIVE, ktp_encode_task_switches(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
  g_ctr.task_switch_frames++;
  r->sw_words = 0;
}

static void task_switch(struct ring *r, uint64_t time, uint32_t cpu, uint32_t next_tid) {
  /* Only a host in session can use them (its trace's stacks); queued while
   * none is, they would only be written into the next trace. */
  if (!ktg_port_connected()) {
    g_ctr.task_switches_unsent += 1 + r->sw_words / 2;
    r->sw_words = 0;
    return;
  }
  if (r->sw_words != 0 &&
      (r->sw_words + 2 > KTP_MAX_SWITCH_WORDS || cpu != r->sw_cpu || time < r->sw_time || time - r->sw_time > UINT32_MAX))
    flush_switches(r);
  if (r->sw_words == 0) {
    r->sw_time = time;
    r->sw_cpu = cpu;
    r->sw_since_ms = ktg_now_ms();
  }
  r->sw[r->sw_words++] = (uint32_t)(time - r->sw_time);
  r->sw[r->sw_words++] = next_tid;
  g_ctr.task_switches++;
}

/* Parses one whole record of `size` bytes (size >= 8, a multiple of 8). */
static void parse_record(struct ring *r, const uint8_t *rec, uint32_t size) {
  uint32_t type = rd32(rec);
  g_ctr.perf_records++;
  if (type == PERF_RECORD_SAMPLE) {
    /* TIME, CPU, RAW in that order (the tracepoint events' sample_type). */
    if (size < 8 + 16 + 4) goto bad;
    uint32_t raw_len = rd32(rec + 24);
    if (raw_len > size - 28) goto bad;
    ktg_modules_sample(rd64(rec + 8), rd32(rec + 16), rec + 28, raw_len);
    return;
  }
  if (size < 8 + SAMPLE_ID_SIZE) goto bad;
  const uint8_t *body = rec + 8;
  uint32_t body_len = size - 8 - SAMPLE_ID_SIZE;
  uint64_t time = rd64(rec + size - SAMPLE_ID_SIZE);
  uint32_t cpu = rd32(rec + size - 8);
  switch (type) {
    case PERF_RECORD_KSYMBOL: {
      if (body_len < 16) goto bad;
      size_t name_len = strnlen((const char *)body + 16, body_len - 16);
      struct ktp_ksymbol m = {time, cpu, rd64(body), rd32(body + 8), rd16(body + 12), rd16(body + 14),
                              {(const char *)body + 16, (uint16_t)(name_len > KTP_MAX_STRING ? KTP_MAX_STRING : name_len)}};
      g_ctr.ksymbols++;
      ktg_enqueue(KTG_LANE_LIVE, ktp_encode_ksymbol(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
      return;
    }
    case PERF_RECORD_BPF_EVENT: {
      if (body_len < 16) goto bad;
      struct ktp_bpf_event m = {time, cpu, rd16(body), rd16(body + 2), rd32(body + 4), {0}};
      memcpy(m.tag, body + 8, 8);
      g_ctr.bpf_events++;
      ktg_enqueue(KTG_LANE_LIVE, ktp_encode_bpf_event(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
      return;
    }
    case PERF_RECORD_TEXT_POKE: {
      if (body_len < 12) goto bad;
      uint16_t old_len = rd16(body + 8), new_len = rd16(body + 10);
      if ((uint32_t)old_len + new_len > body_len - 12) goto bad;
      g_ctr.text_pokes++;
      text_poke(time, cpu, rd64(body), body + 12, old_len, body + 12 + old_len, new_len);
      return;
    }
    case PERF_RECORD_SWITCH_CPU_WIDE: {
      /* u32 next_prev_pid, next_prev_tid: the next task on an out-record. */
      if (body_len < 8) goto bad;
      if (rd16(rec + 4) & PERF_RECORD_MISC_SWITCH_OUT) task_switch(r, time, cpu, rd32(body + 4));
      return;
    }
    case PERF_RECORD_LOST: {
      if (body_len < 16) goto bad;
      uint64_t lost = rd64(body + 8);
      g_ctr.lost_events++;
      ktg_log("cpu %d: perf ring lost %llu records", r->cpu, (unsigned long long)lost);
      r->lost_records += lost;
      report_lost(r, time, r->lost_records);
      return;
    }
    default:
      g_ctr.other_records++;
      return;
  }
bad:
  g_ctr.other_records++;
  ktg_debug("cpu %d: malformed record type %u size %u", r->cpu, type, size);
}

/* Draining merges all rings by record time: a module loaded on one CPU and
 * unloaded on another must reach the host as load, then unload. Each ring's
 * next record is staged in its own buffer; the earliest goes first. Heads are
 * read once per drain, so an event cannot be overtaken by a later one already
 * read from another ring. */
struct cursor {
  struct ring *r;
  uint64_t head, tail;
  uint64_t time;
  uint32_t size;
  int ready;
};

static void ring_corrupt(struct cursor *c) {
  g_ctr.corrupt_rings++;
  ktg_log("cpu %d: impossible record in perf ring (head %llu tail %llu): dropping its contents", c->r->cpu,
          (unsigned long long)c->head, (unsigned long long)c->tail);
  c->tail = c->head;
  c->ready = 0;
}

/* Stages the record at c->tail in c->r->rec; clears ready when the ring is empty. */
static void cursor_load(struct cursor *c) {
  struct ring *r = c->r;
  c->ready = 0;
  if (c->tail >= c->head) return;
  uint64_t avail = c->head - c->tail;
  if (avail < 8) return ring_corrupt(c);
  uint64_t pos = c->tail & (r->size - 1);
  uint8_t hdr[8];
  for (int i = 0; i < 8; ++i) hdr[i] = r->data[(pos + (uint64_t)i) & (r->size - 1)];
  uint32_t size = rd16(hdr + 6);
  if (size < 8 || size % 8 || size > avail) return ring_corrupt(c);
  /* Records wrap at the ring end: copy in up to two pieces. */
  uint64_t first = r->size - pos < size ? r->size - pos : size;
  memcpy(r->rec, r->data + pos, first);
  memcpy(r->rec + first, r->data, size - first);
  c->size = size;
  if (rd32(r->rec) == PERF_RECORD_SAMPLE)
    c->time = size >= 16 ? rd64(r->rec + 8) : 0;
  else
    c->time = size >= 8 + SAMPLE_ID_SIZE ? rd64(r->rec + size - SAMPLE_ID_SIZE) : 0;
  c->ready = 1;
}

void ktg_perf_drain(void) {
  static struct cursor cur[KTG_MAX_CPUS];
  int n = 0;
  for (int cpu = 0; cpu < KTG_MAX_CPUS; ++cpu) {
    struct ring *r = rings[cpu];
    if (!r) continue;
    struct perf_event_mmap_page *pg = (struct perf_event_mmap_page *)r->base;
    struct cursor *c = &cur[n++];
    c->r = r;
    c->head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
    c->tail = pg->data_tail;
    if (c->head - c->tail > r->size)
      ring_corrupt(c);
    else
      cursor_load(c);
  }
  for (;;) {
    struct cursor *next = NULL;
    for (int i = 0; i < n; ++i)
      if (cur[i].ready && (!next || cur[i].time < next->time)) next = &cur[i];
    if (!next) break;
    parse_record(next->r, next->r->rec, next->size);
    next->tail += next->size;
    cursor_load(next);
  }
  for (int i = 0; i < n; ++i) {
    /* A batch waits up to SWITCH_BATCH_MS, or until other frames are going
     * out anyway, so that switches add few writes to the channel (each is
     * kthost's own work in the guest's trace). */
    if (cur[i].r->sw_words != 0 &&
        (ktg_queue_live_bytes() > 0 || ktg_now_ms() - cur[i].r->sw_since_ms >= SWITCH_BATCH_MS))
      flush_switches(cur[i].r);
    struct perf_event_mmap_page *pg = (struct perf_event_mmap_page *)cur[i].r->base;
    __atomic_store_n(&pg->data_tail, cur[i].tail, __ATOMIC_RELEASE);
  }
}

int ktg_online_cpus(uint8_t *online) {
  char buf[4096];
  if (ktg_read_file("/sys/devices/system/cpu/online", buf, sizeof buf) < 0) return -1;
  memset(online, 0, KTG_MAX_CPUS);
  const char *p = buf;
  while (*p && *p != '\n') {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p) return -1;
    p = end;
    if (*p == '-') {
      b = strtol(p + 1, &end, 10);
      if (end == p + 1) return -1;
      p = end;
    }
    for (long c = a; c <= b && c >= 0; ++c)
      if (c < KTG_MAX_CPUS) online[c] = 1;
    if (*p == ',') ++p;
  }
  return 0;
}
