/* Module load and unload, with text ranges.
 *
 * Primary: the module:module_load and module:module_free tracepoints, as perf
 * tracepoint events whose samples land in the per-CPU rings (perf.c). The
 * raw data is decoded with the field offsets from the events' format files
 * (common_type, the event id, is the first u16 of every tracepoint record).
 * module_load fires once the module's sysfs exists and before its init runs;
 * its ranges are read when the sample is drained (within ~100 ms). If the
 * module is already gone by then, a LOST(MODULE_RACE) goes out, followed by a
 * MODULE_LOAD with the name and zero ranges. module_free fires as the module
 * goes, so its ranges come from the table kept since load (or startup).
 * A module unloaded and loaded again under the same name between two drains
 * gets the second instance's ranges for the first load.
 *
 * Fallback (no tracefs, or --module-poll): /proc/modules is read every second
 * and diffed. A module loaded and unloaded within one interval is missed
 * entirely, and nothing can count such misses; module_poll_changes counts what
 * the polls did see.
 *
 * Text size: sysfs gives section start addresses only. The module core puts
 * all executable sections first (layout_sections), so the text is taken to
 * run from .text to the first section above it, inside the core, whose name
 * does not look like code. Code sections placed before .text are not
 * covered. core_size is /proc/modules' size, which includes the init
 * sections while init runs.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ktguest.h"

#include <sys/utsname.h>

#include "kelf.h"

static const char *const tracefs_roots[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};

static struct {
  struct ktg_module *table;
  size_t count, cap;
  int polling;
  uint16_t load_type, free_type;
  uint32_t load_name_off, free_name_off;
} M;

int ktg_modules_polling(void) { return M.polling; }

/* Reads an event's id and the offset of its `__data_loc char[] name` field. */
static int tracepoint(const char *event, long long *id, uint32_t *name_off) {
  static char buf[8192];
  for (size_t i = 0; i < sizeof tracefs_roots / sizeof *tracefs_roots; ++i) {
    char path[256];
    snprintf(path, sizeof path, "%s/events/module/%s/id", tracefs_roots[i], event);
    if (ktg_read_file(path, buf, sizeof buf) < 0) continue;
    *id = strtoll(buf, NULL, 10);
    snprintf(path, sizeof path, "%s/events/module/%s/format", tracefs_roots[i], event);
    if (ktg_read_file(path, buf, sizeof buf) < 0) return -1;
    const char *f = strstr(buf, "__data_loc char[] name;");
    const char *o = f ? strstr(f, "offset:") : NULL;
    if (!o || *id <= 0 || *id > 0xffff) return -1;
    *name_off = (uint32_t)strtoul(o + 7, NULL, 10);
    return 0;
  }
  return -1;
}

static int code_like(const char *section) {
  return strstr(section, "text") != NULL || strcmp(section, ".altinstr_replacement") == 0 ||
         strncmp(section, ".fixup", 6) == 0;
}

static int read_hex(const char *path, uint64_t *out) {
  char buf[64];
  if (ktg_read_file(path, buf, sizeof buf) < 0) return -1;
  char *end;
  *out = strtoull(buf, &end, 16);
  return end == buf ? -1 : 0;
}

/* Fills m from /proc/modules and /sys/module/NAME/sections; -1 if absent. */
static int read_module(const char *name, struct ktg_module *m) {
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s", name);
  FILE *f = fopen("/proc/modules", "re");
  if (!f) return -1;
  char line[1024], n[KTG_MODNAME];
  unsigned long long size, addr;
  int found = 0;
  while (!found && fgets(line, sizeof line, f))
    if (sscanf(line, "%63s %llu %*s %*s %*s %llx", n, &size, &addr) == 3 && strcmp(n, name) == 0) found = 1;
  fclose(f);
  if (!found) return -1;
  m->core_addr = addr;
  m->core_size = size;
  char dir[256], path[600];
  snprintf(dir, sizeof dir, "/sys/module/%s/sections", name);
  snprintf(path, sizeof path, "%s/.text", dir);
  if (read_hex(path, &m->text_addr) != 0) return access(dir, F_OK) == 0 ? 0 : -1;
  DIR *d = opendir(dir);
  if (!d) return -1;
  uint64_t end = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t a;
    if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || strcmp(e->d_name, "..") == 0)) continue;
    if (code_like(e->d_name)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (read_hex(path, &a) != 0) continue;
    if (a > m->text_addr && a >= addr && a - addr < size && (!end || a < end)) end = a;
  }
  closedir(d);
  if (end) m->text_size = end - m->text_addr;
  else if (m->text_addr >= addr && m->text_addr - addr < size) m->text_size = addr + size - m->text_addr;
  /* Exact .text size from the module's own file when it can be found; the
   * section-address estimate above (which also spans .text.unlikely and
   * padding) is the fallback. */
  struct utsname u;
  char file[1024];
  uint64_t exact = 0;
  if (uname(&u) == 0 && kelf_find_module_file(u.release, name, file, sizeof file) == 0 &&
      kelf_section_size(file, ".text", &exact) == 0 && exact > 0)
    m->text_size = exact;
  return 0;
}

static struct ktg_module *find(const char *name) {
  for (size_t i = 0; i < M.count; ++i)
    if (strcmp(M.table[i].name, name) == 0) return &M.table[i];
  return NULL;
}

static void upsert(const struct ktg_module *m) {
  struct ktg_module *old = find(m->name);
  if (old) {
    *old = *m;
    return;
  }
  if (M.count == M.cap) {
    size_t cap = M.cap ? M.cap * 2 : 64;
    struct ktg_module *t = realloc(M.table, cap * sizeof *t);
    if (!t) return;
    M.table = t;
    M.cap = cap;
  }
  M.table[M.count++] = *m;
}

static void forget(const char *name) {
  struct ktg_module *m = find(name);
  if (m) *m = M.table[--M.count];
}

static void emit(uint8_t type, uint64_t time, const struct ktg_module *km) {
  struct ktp_module m = {time, {km->name, (uint16_t)strnlen(km->name, sizeof km->name)},
                         km->text_addr, km->text_size, km->core_addr, km->core_size};
  ktg_enqueue(KTG_LANE_LIVE, type == KTP_MODULE_LOAD ? ktp_encode_module_load(ktg_scratch(), KTP_MAX_FRAME, 0, &m)
                                                  : ktp_encode_module_unload(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
}

static void loaded(uint64_t time, uint32_t cpu, const char *name) {
  struct ktg_module m;
  g_ctr.module_loads++;
  ktg_symcache_module_changed();
  if (read_module(name, &m) != 0) {
    g_ctr.module_races++;
    ktg_log("module %s was gone before its ranges could be read", name);
    struct ktp_lost l = {time, cpu, KTP_LOST_MODULE_RACE, KTP_MODULE_LOAD, 1};
    ktg_enqueue(KTG_LANE_LIVE, ktp_encode_lost(ktg_scratch(), KTP_MAX_FRAME, 0, &l));
  } else {
    upsert(&m);
  }
  ktg_debug("module %s loaded: .text 0x%llx+0x%llx", name, (unsigned long long)m.text_addr,
            (unsigned long long)m.text_size);
  emit(KTP_MODULE_LOAD, time, &m);
}

static void unloaded(uint64_t time, const char *name) {
  struct ktg_module m;
  const struct ktg_module *known = find(name);
  if (known) {
    m = *known;
  } else {
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "%s", name);
  }
  g_ctr.module_unloads++;
  ktg_symcache_module_changed();
  ktg_debug("module %s unloaded", name);
  emit(KTP_MODULE_UNLOAD, time, &m);
  forget(name);
}

int ktg_modules_init(long long *load_id, long long *free_id) {
  *load_id = *free_id = -1;
  ktg_modules_rescan(NULL);
  if (g_opt.module_poll) {
    M.polling = 1;
    return -1;
  }
  long long l, f;
  if (tracepoint("module_load", &l, &M.load_name_off) != 0 || tracepoint("module_free", &f, &M.free_name_off) != 0) {
    M.polling = 1;
    return -1;
  }
  M.load_type = (uint16_t)l;
  M.free_type = (uint16_t)f;
  *load_id = l;
  *free_id = f;
  return 0;
}

void ktg_modules_sample(uint64_t time, uint32_t cpu, const uint8_t *raw, uint32_t raw_len) {
  if (raw_len < 2) return;
  uint16_t type;
  memcpy(&type, raw, 2);
  uint32_t off;
  if (type == M.load_type) off = M.load_name_off;
  else if (type == M.free_type) off = M.free_name_off;
  else return;
  uint32_t loc;
  if (off > raw_len || raw_len - off < 4) return;
  memcpy(&loc, raw + off, 4);
  uint32_t at = loc & 0xffff, len = loc >> 16;
  if (at > raw_len || len > raw_len - at) return;
  char name[KTG_MODNAME];
  size_t n = strnlen((const char *)raw + at, len);
  if (n == 0 || n >= sizeof name) return;
  memcpy(name, raw + at, n);
  name[n] = '\0';
  if (type == M.load_type) loaded(time, cpu, name);
  else unloaded(time, name);
}

const struct ktg_module *ktg_modules_rescan(size_t *count) {
  FILE *f = fopen("/proc/modules", "re");
  M.count = 0;
  if (f) {
    char line[1024], n[KTG_MODNAME];
    while (fgets(line, sizeof line, f)) {
      struct ktg_module m;
      if (sscanf(line, "%63s", n) == 1 && read_module(n, &m) == 0) upsert(&m);
    }
    fclose(f);
  }
  if (count) *count = M.count;
  return M.table;
}

void ktg_modules_poll(void) {
  if (!M.polling) return;
  FILE *f = fopen("/proc/modules", "re");
  if (!f) return;
  static char seen[4096][KTG_MODNAME];
  size_t nseen = 0;
  char line[1024];
  uint64_t now = ktg_perf_now();
  while (fgets(line, sizeof line, f) && nseen < sizeof seen / sizeof *seen) {
    if (sscanf(line, "%63s", seen[nseen]) != 1) continue;
    if (!find(seen[nseen])) {
      g_ctr.module_poll_changes++;
      loaded(now, UINT32_MAX, seen[nseen]);
    }
    ++nseen;
  }
  fclose(f);
  for (size_t i = 0; i < M.count;) {
    size_t j = 0;
    while (j < nseen && strcmp(seen[j], M.table[i].name) != 0) ++j;
    if (j < nseen) {
      ++i;
      continue;
    }
    g_ctr.module_poll_changes++;
    unloaded(now, M.table[i].name); /* forget() moves the last entry here */
  }
}
