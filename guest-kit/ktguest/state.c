/* The state dump: HELLO, STATE_BEGIN, symbols, modules, BPF programs, CPUs,
 * STATE_END, built for every host connection.
 *
 * The symbols are the symbol cache's frames (symcache.c): /proc/kallsyms is
 * not read here, so a dump costs the guest kernel only the module, BPF and
 * CPU lookups and the writes. Only when a host connects before the first
 * read is done does the dump wait for it. The frames are held here until the
 * end, because STATE_BEGIN, which goes first, carries exact counts. Live
 * events that happen meanwhile are queued and follow STATE_END.
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

static struct {
  int active, complete;
  uint32_t reason;
  uint64_t begin_time;
  struct ktg_held_list frames; /* everything after the symbols, until STATE_END */
} D;

int ktg_dump_busy(void) { return D.active; }
int ktg_dump_complete(void) { return D.complete; }

static void hold_frame(long n) { ktg_held_add(&D.frames, n); }

void ktg_dump_abort(void) {
  ktg_held_clear(&D.frames);
  D.active = D.complete = 0;
}

void ktg_dump_start(int reason) {
  ktg_dump_abort();
  D.active = 1;
  D.reason = (uint32_t)reason;
  D.begin_time = ktg_perf_now();
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
  uint32_t nsyms;
  const struct ktg_held_list *symbols = ktg_symcache_frames(&nsyms);
  struct ktp_state_begin b = {D.begin_time, D.reason, nsyms, (uint32_t)nmods, nbpf};
  ktg_enqueue(KTG_LANE_DUMP, ktp_encode_state_begin(ktg_scratch(), KTP_MAX_FRAME, 0, &b));
  ktg_held_enqueue(symbols, KTG_LANE_DUMP);
  ktg_held_enqueue(&D.frames, KTG_LANE_DUMP);
  ktg_held_clear(&D.frames);
  D.active = 0;
  D.complete = 1;
  g_ctr.dumps++;
  ktg_log("state dump %s: %u symbols, %zu modules, %u BPF programs, %u CPUs",
          D.reason == KTP_STATE_START ? "(start)" : "(reconnect)", nsyms, nmods, nbpf, c.count);
}

int ktg_dump_step(void) {
  if (!D.active) return 0;
  /* Only the first read can still be running here (a refresh gives way to
   * the session); main.c steps it. */
  if (!ktg_symcache_ready()) return 1;
  finish();
  return 0;
}
