/* The state dump: HELLO, STATE_BEGIN, kallsyms, modules, BPF programs, CPUs,
 * STATE_END, built for every host connection.
 *
 * /proc/kallsyms (~95k lines) takes a while to read under TCG, so it is read
 * in slices between poll rounds: the perf rings keep being drained. Its
 * frames are held here until the end, because STATE_BEGIN, which goes
 * first, carries the symbol count. Live events that happen meanwhile are
 * queued and follow STATE_END.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ktguest.h"

#define LINES_PER_STEP 4096

struct held {
  uint8_t *data;
  uint32_t len;
};

static struct {
  int active, complete;
  uint32_t reason;
  uint64_t begin_time;
  FILE *kallsyms;
  uint32_t nsyms;
  struct held *frames;
  size_t nframes, cap;
  struct ktp_symbol batch[KTP_MAX_BATCH];
  uint32_t batch_n;
  char arena[KTP_MAX_PAYLOAD];
  size_t arena_used;
  size_t payload; /* encoded size of the batch so far */
} D;

int ktg_dump_busy(void) { return D.active; }
int ktg_dump_complete(void) { return D.complete; }

static void hold_frame(long n) {
  if (n < 0) {
    g_ctr.encode_errors++;
    ktg_log("encode of a state frame failed: %s", ktp_status_name((int)n));
    return;
  }
  if (D.nframes == D.cap) {
    size_t cap = D.cap ? D.cap * 2 : 128;
    struct held *f = realloc(D.frames, cap * sizeof *f);
    if (!f) return;
    D.frames = f;
    D.cap = cap;
  }
  uint8_t *copy = malloc((size_t)n);
  if (!copy) return;
  memcpy(copy, ktg_scratch(), (size_t)n);
  D.frames[D.nframes].data = copy;
  D.frames[D.nframes].len = (uint32_t)n;
  D.nframes++;
}

static void flush_batch(void) {
  if (D.batch_n == 0) return;
  struct ktp_state_symbols m = {D.batch_n, D.batch};
  hold_frame(ktp_encode_state_symbols(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
  D.batch_n = 0;
  D.arena_used = 0;
  D.payload = 4;
}

static void free_held(void) {
  for (size_t i = 0; i < D.nframes; ++i) free(D.frames[i].data);
  D.nframes = 0;
}

void ktg_dump_abort(void) {
  if (D.kallsyms) fclose(D.kallsyms);
  D.kallsyms = NULL;
  free_held();
  D.active = D.complete = 0;
}

void ktg_dump_start(int reason) {
  ktg_dump_abort();
  D.active = 1;
  D.reason = (uint32_t)reason;
  D.begin_time = ktg_perf_now();
  D.nsyms = 0;
  D.batch_n = 0;
  D.arena_used = 0;
  D.payload = 4;
  D.kallsyms = fopen("/proc/kallsyms", "re");
  if (!D.kallsyms) ktg_log("open /proc/kallsyms: %s (the dump has no symbols)", strerror(errno));
}

/* "ffffffffc0200000 t name\t[module]" */
static void add_line(char *line) {
  char *p = line, *end;
  uint64_t addr = strtoull(p, &end, 16);
  if (end == p || end[0] != ' ' || !end[1] || end[2] != ' ') return;
  uint8_t type = (uint8_t)end[1];
  char *name = end + 3;
  size_t name_len = strcspn(name, "\t\n");
  char *mod = name + name_len;
  size_t mod_len = 0;
  if (*mod == '\t' && mod[1] == '[') {
    mod += 2;
    mod_len = strcspn(mod, "]\n");
  }
  if (name_len == 0) return;
  if (name_len > KTP_MAX_STRING) name_len = KTP_MAX_STRING;
  if (mod_len > KTP_MAX_STRING) mod_len = KTP_MAX_STRING;
  size_t enc = 8 + 1 + 2 + name_len + 2 + mod_len;
  if (D.batch_n == KTP_MAX_BATCH || D.payload + enc > KTP_MAX_PAYLOAD ||
      D.arena_used + name_len + mod_len > sizeof D.arena)
    flush_batch();
  char *n = D.arena + D.arena_used;
  memcpy(n, name, name_len);
  memcpy(n + name_len, mod, mod_len);
  D.arena_used += name_len + mod_len;
  struct ktp_symbol *s = &D.batch[D.batch_n++];
  s->addr = addr;
  s->type = type;
  s->name.data = n;
  s->name.len = (uint16_t)name_len;
  s->module.data = n + name_len;
  s->module.len = (uint16_t)mod_len;
  D.payload += enc;
  D.nsyms++;
}

static long sys_bpf(int cmd, union bpf_attr *attr) { return syscall(SYS_bpf, cmd, attr, sizeof *attr); }

/* Holds one STATE_BPF per loaded program; returns how many. */
static uint32_t dump_bpf(void) {
  uint32_t id = 0, n = 0;
  for (;;) {
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.start_id = id;
    if (sys_bpf(BPF_PROG_GET_NEXT_ID, &a) != 0) {
      if (errno != ENOENT) ktg_log("BPF_PROG_GET_NEXT_ID: %s", strerror(errno));
      break;
    }
    id = a.next_id;
    memset(&a, 0, sizeof a);
    a.prog_id = id;
    int fd = (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &a);
    if (fd < 0) continue; /* unloaded meanwhile */
    struct bpf_prog_info info;
    uint64_t ksym = 0;
    memset(&info, 0, sizeof info);
    info.nr_jited_ksyms = 1;
    info.jited_ksyms = (uint64_t)(uintptr_t)&ksym;
    memset(&a, 0, sizeof a);
    a.info.bpf_fd = (uint32_t)fd;
    a.info.info_len = sizeof info;
    a.info.info = (uint64_t)(uintptr_t)&info;
    long r = sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a);
    close(fd);
    if (r != 0) continue;
    struct ktp_bpf_prog m = {info.id, info.type, {0}, {info.name, (uint16_t)strnlen(info.name, sizeof info.name)},
                             info.nr_jited_ksyms ? ksym : 0, info.jited_prog_len};
    memcpy(m.tag, info.tag, sizeof m.tag);
    hold_frame(ktp_encode_state_bpf(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
    ++n;
  }
  return n;
}

static void finish(void) {
  static uint32_t cpus[KTG_MAX_CPUS];
  flush_batch();
  size_t nmods;
  const struct ktg_module *mods = ktg_modules_rescan(&nmods);
  for (size_t i = 0; i < nmods; ++i) {
    const struct ktg_module *km = &mods[i];
    struct ktp_module m = {D.begin_time, {km->name, (uint16_t)strnlen(km->name, sizeof km->name)},
                           km->text_addr, km->text_size, km->core_addr, km->core_size};
    hold_frame(ktp_encode_state_module(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
  }
  uint32_t nbpf = dump_bpf();
  struct ktp_cpus c = {ktg_perf_cpus(cpus, KTG_MAX_CPUS), cpus};
  hold_frame(ktp_encode_state_cpus(ktg_scratch(), KTP_MAX_FRAME, 0, &c));
  struct ktp_state_end e = {ktg_perf_now()};
  hold_frame(ktp_encode_state_end(ktg_scratch(), KTP_MAX_FRAME, 0, &e));
  /* Everything is held until here so that STATE_BEGIN, which goes first,
   * carries exact counts. */
  ktg_enqueue(KTG_LANE_DUMP, ktg_encode_hello());
  struct ktp_state_begin b = {D.begin_time, D.reason, D.nsyms, (uint32_t)nmods, nbpf};
  ktg_enqueue(KTG_LANE_DUMP, ktp_encode_state_begin(ktg_scratch(), KTP_MAX_FRAME, 0, &b));
  for (size_t i = 0; i < D.nframes; ++i) {
    memcpy(ktg_scratch(), D.frames[i].data, D.frames[i].len);
    ktg_enqueue(KTG_LANE_DUMP, (long)D.frames[i].len);
  }
  free_held();
  D.active = 0;
  D.complete = 1;
  g_ctr.dumps++;
  ktg_log("state dump %s: %u symbols, %zu modules, %u BPF programs, %u CPUs",
          D.reason == KTP_STATE_START ? "(start)" : "(reconnect)", D.nsyms, nmods, nbpf, c.count);
}

int ktg_dump_step(void) {
  if (!D.active) return 0;
  if (D.kallsyms) {
    static char line[4096];
    for (int i = 0; i < LINES_PER_STEP; ++i) {
      if (!fgets(line, sizeof line, D.kallsyms)) {
        fclose(D.kallsyms);
        D.kallsyms = NULL;
        break;
      }
      add_line(line);
    }
    if (D.kallsyms) return 1;
  }
  finish();
  return 0;
}
