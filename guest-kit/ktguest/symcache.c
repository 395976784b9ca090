/* The symbol cache: /proc/kallsyms, read while no host is connected and kept
 * as encoded STATE_SYMBOLS frames, so that a state dump never formats
 * kallsyms while a host is tracing (formatting ~95k lines costs the guest
 * kernel hundreds of millions of instructions, which a trace would record as
 * if the workload had run them).
 *
 * States:
 *   EMPTY    nothing read yet
 *   READING  a read is under way, in slices between poll rounds; frames go to
 *            `next` and replace `ready` only when the read is complete
 *   READY    `ready` holds a complete read
 * A module load or unload marks a READY cache stale. A stale cache is read
 * again from the 1 s timer, but only while no host session is open: a
 * session that starts meanwhile aborts the refresh and gets the older, still
 * complete, cache. The only read that runs during a session is the first
 * one, when a host connects before it is done (counted: reads_in_session).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ktguest.h"

#define LINES_PER_STEP 4096
#define STALE_SETTLE_MS 2000 /* a burst of module changes refreshes once */

struct symbol_frames {
  struct ktg_held_list list;
  uint32_t symbols;
};

static struct {
  enum { SC_EMPTY, SC_READING, SC_READY } state;
  int have_ready;             /* `ready` holds a complete read */
  int stale;                  /* a module changed since `ready` was read */
  long long stale_since;      /* when a module last changed; 0: never */
  int read_in_session;        /* the running read overlapped a session */
  long long read_started_ms;
  FILE *kallsyms;
  struct symbol_frames ready, next;
  struct ktp_symbol batch[KTP_MAX_BATCH];
  uint32_t batch_n;
  char arena[KTP_MAX_PAYLOAD];
  size_t arena_used;
  size_t payload; /* encoded size of the batch so far */
  struct ktg_symcache_stats stats;
} C;

static void frames_free(struct symbol_frames *f) {
  ktg_held_free(&f->list);
  f->symbols = 0;
}

static void reset_batch(void) {
  C.batch_n = 0;
  C.arena_used = 0;
  C.payload = 4;
}

static void flush_batch(void) {
  if (C.batch_n == 0) return;
  struct ktp_state_symbols m = {C.batch_n, C.batch};
  ktg_held_add(&C.next.list, ktp_encode_state_symbols(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
  reset_batch();
}

/* "ffffffffc0200000 t name\t[module]"; lines that do not parse are skipped. */
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
  if (C.batch_n == KTP_MAX_BATCH || C.payload + enc > KTP_MAX_PAYLOAD ||
      C.arena_used + name_len + mod_len > sizeof C.arena)
    flush_batch();
  char *n = C.arena + C.arena_used;
  memcpy(n, name, name_len);
  memcpy(n + name_len, mod, mod_len);
  C.arena_used += name_len + mod_len;
  struct ktp_symbol *s = &C.batch[C.batch_n++];
  s->addr = addr;
  s->type = type;
  s->name.data = n;
  s->name.len = (uint16_t)name_len;
  s->module.data = n + name_len;
  s->module.len = (uint16_t)mod_len;
  C.payload += enc;
  C.next.symbols++;
}

static void start_read(const char *why) {
  frames_free(&C.next);
  reset_batch();
  C.kallsyms = fopen("/proc/kallsyms", "re");
  if (!C.kallsyms) {
    ktg_log("open /proc/kallsyms: %s (dumps carry no symbols)", strerror(errno));
    C.stats.open_failures++;
  }
  C.state = SC_READING;
  C.read_in_session = ktg_port_connected();
  C.read_started_ms = ktg_now_ms();
  ktg_debug("reading /proc/kallsyms (%s)", why);
}

static void abort_read(void) {
  if (C.kallsyms) fclose(C.kallsyms);
  C.kallsyms = NULL;
  frames_free(&C.next);
  C.state = C.have_ready ? SC_READY : SC_EMPTY;
}

static void finish_read(void) {
  flush_batch();
  frames_free(&C.ready);
  C.ready = C.next;
  memset(&C.next, 0, sizeof C.next);
  C.have_ready = 1;
  C.stale = C.stale_since >= C.read_started_ms; /* a module changed during the read */
  C.state = SC_READY;
  C.stats.reads++;
  if (C.read_in_session) C.stats.reads_in_session++;
  C.stats.last_read_ms = (uint64_t)(ktg_now_ms() - C.read_started_ms);
  C.stats.symbols = C.ready.symbols;
  ktg_log("kallsyms read: %u symbols in %llu ms%s", C.ready.symbols, (unsigned long long)C.stats.last_read_ms,
          C.read_in_session ? " (while a host was connected)" : "");
}

void ktg_symcache_init(void) { start_read("startup"); }

int ktg_symcache_step(void) {
  if (C.state != SC_READING) return 0;
  if (ktg_port_connected()) C.read_in_session = 1;
  if (C.kallsyms) {
    static char line[4096];
    for (int i = 0; i < LINES_PER_STEP; ++i) {
      if (!fgets(line, sizeof line, C.kallsyms)) {
        fclose(C.kallsyms);
        C.kallsyms = NULL;
        break;
      }
      add_line(line);
    }
    if (C.kallsyms) return 1;
  }
  finish_read();
  return 0;
}

int ktg_symcache_busy(void) { return C.state == SC_READING; }

int ktg_symcache_ready(void) { return C.have_ready; }

void ktg_symcache_host_arrived(void) {
  /* A refresh gives way to the host: the older cache is complete. */
  if (C.state == SC_READING && C.have_ready) {
    ktg_log("kallsyms refresh abandoned: a host connected (the dump uses the read from before the last module change)");
    C.stats.refreshes_abandoned++;
    abort_read();
  }
}

void ktg_symcache_module_changed(void) {
  C.stale_since = ktg_now_ms();
  if (C.have_ready) C.stale = 1;
}

void ktg_symcache_every_second(void) {
  if (C.state == SC_READY && C.stale && !ktg_port_connected() && ktg_now_ms() - C.stale_since >= STALE_SETTLE_MS)
    start_read("a module changed");
}

const struct ktg_held_list *ktg_symcache_frames(uint32_t *symbols) {
  *symbols = C.ready.symbols;
  return &C.ready.list;
}

struct ktg_symcache_stats ktg_symcache_stats(void) {
  struct ktg_symcache_stats s = C.stats;
  s.stale = C.stale;
  s.ready = C.have_ready;
  return s;
}
