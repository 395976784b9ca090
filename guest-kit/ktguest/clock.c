/* Guest time and identity.
 *
 * Record times are the default perf clock (local_clock), which userspace
 * cannot read directly. With cap_user_time_zero, rdtsc plus the mmap page's
 * time_zero/mult/shift gives it exactly. Without it (the TCG guest marks the
 * TSC unstable and uses hpet), "now" is measured: a task-bound dummy event
 * with comm=1 records a PERF_RECORD_COMM, stamped by the perf clock, each
 * time this process renames itself to the same name. CLOCK_MONOTONIC is the
 * last resort, and is only close.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "ktguest.h"

static struct {
  int fd;
  uint8_t *base;
  size_t page, size;
  struct ktp_clock last;
  int have_last;
  uint64_t session;
  struct utsname uts;
  char build_id[41];
} C = {.fd = -1};

static void read_build_id(void) {
  /* /sys/kernel/notes is vmlinux's note section: namesz, descsz, type, name, desc. */
  uint8_t buf[4096];
  long n = ktg_read_file("/sys/kernel/notes", (char *)buf, sizeof buf);
  for (long off = 0; n > 0 && off + 12 <= n;) {
    uint32_t namesz, descsz, type;
    memcpy(&namesz, buf + off, 4);
    memcpy(&descsz, buf + off + 4, 4);
    memcpy(&type, buf + off + 8, 4);
    long name_at = off + 12, desc_at = name_at + (long)((namesz + 3) & ~3u);
    long next = desc_at + (long)((descsz + 3) & ~3u);
    if (namesz > 64 || descsz > 1024 || next > n) break;
    if (type == 3 && namesz == 4 && memcmp(buf + name_at, "GNU", 4) == 0 && descsz <= 20) {
      for (uint32_t i = 0; i < descsz; ++i) snprintf(C.build_id + 2 * i, 3, "%02x", buf[desc_at + i]);
      return;
    }
    off = next;
  }
}

int ktg_clock_init(void) {
  if (getrandom(&C.session, sizeof C.session, 0) != sizeof C.session) C.session = (uint64_t)ktg_now_ms() ^ (uint64_t)getpid();
  uname(&C.uts);
  read_build_id();
  C.page = (size_t)sysconf(_SC_PAGESIZE);
  C.size = C.page;
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_DUMMY;
  a.comm = 1;
  a.sample_id_all = 1;
  a.sample_type = PERF_SAMPLE_TIME;
  C.fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (C.fd < 0) {
    ktg_log("perf clock probe: perf_event_open: %s (times fall back to CLOCK_MONOTONIC)", strerror(errno));
    return -1;
  }
  void *m = mmap(NULL, C.page + C.size, PROT_READ | PROT_WRITE, MAP_SHARED, C.fd, 0);
  if (m == MAP_FAILED) {
    close(C.fd);
    C.fd = -1;
    return -1;
  }
  C.base = m;
  return 0;
}

int ktg_clock_read(struct ktp_clock *out) {
  const volatile struct perf_event_mmap_page *pg = ktg_perf_first_page();
  memset(out, 0, sizeof *out);
  if (!pg) return -1;
  /* The kernel updates the page under a sequence count. */
  for (int tries = 0; tries < 1000; ++tries) {
    uint32_t seq = pg->lock;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    out->cap_user_time_zero = (uint8_t)pg->cap_user_time_zero;
    out->time_zero = pg->time_zero;
    out->time_mult = pg->time_mult;
    out->time_shift = pg->time_shift;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (pg->lock == seq && !(seq & 1)) return 0;
  }
  return -1;
}

/* Reads the newest COMM record's time from the probe ring. */
static int probe_time(uint64_t *out) {
  struct perf_event_mmap_page *pg = (struct perf_event_mmap_page *)C.base;
  char name[16];
  if (prctl(PR_GET_NAME, name) != 0 || prctl(PR_SET_NAME, name) != 0) return -1;
  uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE), tail = pg->data_tail;
  uint8_t *data = C.base + C.page;
  int found = -1;
  if (head - tail > C.size) tail = head; /* impossible: resync */
  while (head - tail >= 8) {
    uint8_t rec[256];
    uint64_t pos = tail & (C.size - 1);
    for (int i = 0; i < 8; ++i) rec[i] = data[(pos + (uint64_t)i) & (C.size - 1)];
    uint16_t size;
    uint32_t type;
    memcpy(&type, rec, 4);
    memcpy(&size, rec + 6, 2);
    if (size < 8 || size > head - tail || size > sizeof rec) {
      tail = head;
      break;
    }
    for (uint32_t i = 0; i < size; ++i) rec[i] = data[(pos + i) & (C.size - 1)];
    if (type == PERF_RECORD_COMM && size >= 16) {
      memcpy(out, rec + size - 8, 8);
      found = 0;
    }
    tail += size;
  }
  __atomic_store_n(&pg->data_tail, tail, __ATOMIC_RELEASE);
  return found;
}

uint64_t ktg_perf_now(void) {
  struct ktp_clock c;
  if (ktg_clock_read(&c) == 0 && c.cap_user_time_zero && c.time_mult) {
    uint64_t cyc = __rdtsc();
    uint64_t quot = cyc >> c.time_shift, rem = cyc & ((1ull << c.time_shift) - 1);
    return c.time_zero + quot * c.time_mult + ((rem * c.time_mult) >> c.time_shift);
  }
  uint64_t t;
  if (C.fd >= 0 && probe_time(&t) == 0) return t;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ktg_clock_check(void) {
  struct ktp_clock c;
  if (ktg_clock_read(&c) != 0) return;
  if (C.have_last && memcmp(&c, &C.last, sizeof c) == 0) return;
  int first = !C.have_last;
  C.last = c;
  C.have_last = 1;
  ktg_log("perf clock: cap_user_time_zero=%u time_zero=%llu mult=%u shift=%u", c.cap_user_time_zero,
          (unsigned long long)c.time_zero, c.time_mult, c.time_shift);
  /* HELLO carries the first value; only changes go out as CLOCK. */
  if (!first) {
    struct ktp_clock_change change = {ktg_perf_now(), c};
    ktg_enqueue(KTG_LANE_LIVE, ktp_encode_clock(ktg_scratch(), KTP_MAX_FRAME, 0, &change));
  }
}

long ktg_encode_hello(void) {
  static uint32_t cpus[KTG_MAX_CPUS];
  struct ktp_hello h;
  memset(&h, 0, sizeof h);
  h.proto_minor = KTP_PROTO_MINOR;
  h.cpu_count = ktg_perf_cpus(cpus, KTG_MAX_CPUS);
  h.boot_time_ns = ktg_perf_now();
  h.session = C.session;
  ktg_clock_read(&h.clock);
  h.release.data = C.uts.release;
  h.release.len = (uint16_t)strnlen(C.uts.release, sizeof C.uts.release);
  h.build_id.data = C.build_id;
  h.build_id.len = (uint16_t)strlen(C.build_id);
  return ktp_encode_hello(ktg_scratch(), KTP_MAX_FRAME, 0, &h);
}
