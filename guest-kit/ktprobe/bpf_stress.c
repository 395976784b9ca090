/* ktprobe bpf-stress: loads many small BPF programs of several types with raw
 * bpf(2) calls, records each program's JIT image (address, length, bytes) as
 * the kernel reports it right after the load, and unloads them in batches.
 * fentry/fexit programs are also attached, so the kernel builds a BPF
 * trampoline; the traced function is called once, then the link is closed
 * and the trampoline freed. It drives JIT allocation and freeing, the
 * KSYMBOL/BPF_EVENT side band and trampoline text for kthost tests; the file
 * it writes is the guest's own account of every JIT image.
 *
 *   ktprobe bpf-stress --count N --out FILE [--kinds LIST] [--batch K] [--seed S] [--calls C]
 *
 *   --count N   programs to load in all (1..1000000), cycling through LIST
 *   --out FILE  one line per program, in load order:
 *                 prog <index> <id> <kind> 0x<jited addr> <jited len> <hex of the jited bytes>
 *   --kinds     comma-separated, from socket,xdp,tracepoint,kprobe,fentry,fexit
 *               (the default: all of them, in that order)
 *   --batch K   at most K programs loaded at a time (1..512, default 16): when
 *               K are loaded, all are closed before the next load
 *   --calls C   how many times the traced function is called while each
 *               fentry/fexit program is attached (1..1000000, default 1), so
 *               that the programs run enough to be counted in a trace
 *   --seed S    varies the program bodies (default 1); the same seed gives
 *               the same programs
 *
 * Each body is 2..64 ALU instructions (the number, the operations, registers
 * and immediates vary by index and seed, so JIT sizes differ), then r0 = a
 * value the program type allows, exit. Programs are named
 * kts_<kind>_<index>, the kind cut short to fit the 15 characters the kernel
 * allows. fentry/fexit attach to __x64_sys_getppid (or, if the kernel's BTF
 * lacks it, the first of TARGETS below that it has), whose BTF id comes from
 * a parser of /sys/kernel/btf/vmlinux in this file (no libbpf in the guest).
 *
 * stdout: one JSON line, {"loaded":N,"by_kind":{...},"failed":0,"seconds":S,
 * "load_us_total":..,"unload_us_total":..,"attach_us_total":..,...}. The run
 * stops at the first failure, prints why (with the verifier log for a failed
 * load) on stderr, still prints the summary, and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <linux/bpf.h>
#include <linux/btf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bpf_stress.h"

#define MAX_COUNT 1000000u
#define MAX_BATCH 512u
#define MAX_KIND_LIST 64
#define MIN_ALU 2u
#define MAX_ALU 64u
#define MAX_BTF_SIZE (256u << 20)
#define MAX_KSYMS 8
#define LOG_SIZE (1u << 20)
#define BTF_PATH "/sys/kernel/btf/vmlinux"

enum { K_SOCKET, K_XDP, K_TRACEPOINT, K_KPROBE, K_FENTRY, K_FEXIT, K_NR };

struct kind {
  const char *name;
  uint32_t prog_type;
  uint32_t attach_type; /* expected_attach_type */
  int32_t ret;          /* r0 at exit, in the range the verifier allows for the type */
  int tracing;          /* needs attach_btf_id; attached, triggered, detached */
};

static const struct kind KINDS[K_NR] = {
    [K_SOCKET] = {"socket", BPF_PROG_TYPE_SOCKET_FILTER, 0, 0, 0},
    [K_XDP] = {"xdp", BPF_PROG_TYPE_XDP, 0, XDP_PASS, 0},
    [K_TRACEPOINT] = {"tracepoint", BPF_PROG_TYPE_TRACEPOINT, 0, 0, 0},
    [K_KPROBE] = {"kprobe", BPF_PROG_TYPE_KPROBE, 0, 0, 0},
    [K_FENTRY] = {"fentry", BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, 0, 1},
    [K_FEXIT] = {"fexit", BPF_PROG_TYPE_TRACING, BPF_TRACE_FEXIT, 0, 1},
};

/* Functions fentry/fexit may attach to, in order of preference, each with a
 * system call (and argument) that runs it. pahole leaves some syscall
 * wrappers out of a kernel's BTF, hence the alternatives. */
static const struct {
  const char *func;
  long sysno, arg;
} TARGETS[] = {
    {"__x64_sys_getppid", SYS_getppid, 0},
    {"__x64_sys_getpgid", SYS_getpgid, 0},
    {"__x64_sys_getpid", SYS_getpid, 0},
    {"__x64_sys_getuid", SYS_getuid, 0},
    {"__x64_sys_getpriority", SYS_getpriority, 0 /* PRIO_PROCESS, who 0: this process */},
};
#define N_TARGETS (sizeof TARGETS / sizeof TARGETS[0])

static long bpf_sys(int cmd, union bpf_attr *attr) { return syscall(SYS_bpf, cmd, attr, sizeof *attr); }

static int parse_num(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end || *s == '-') return -1;
  *out = v;
  return 0;
}

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- a minimal BTF reader: header, type section, string section ---- */

/* Bytes that follow a struct btf_type of this kind; -1 for a kind unknown here. */
static long btf_extra(uint32_t kind, uint32_t vlen) {
  switch (kind) {
  case BTF_KIND_INT: return 4;
  case BTF_KIND_PTR:
  case BTF_KIND_FWD:
  case BTF_KIND_TYPEDEF:
  case BTF_KIND_VOLATILE:
  case BTF_KIND_CONST:
  case BTF_KIND_RESTRICT:
  case BTF_KIND_FUNC:
  case BTF_KIND_FLOAT:
  case BTF_KIND_TYPE_TAG: return 0;
  case BTF_KIND_ARRAY: return (long)sizeof(struct btf_array);
  case BTF_KIND_STRUCT:
  case BTF_KIND_UNION: return (long)(vlen * sizeof(struct btf_member));
  case BTF_KIND_ENUM: return (long)(vlen * sizeof(struct btf_enum));
  case BTF_KIND_FUNC_PROTO: return (long)(vlen * sizeof(struct btf_param));
  case BTF_KIND_VAR: return (long)sizeof(struct btf_var);
  case BTF_KIND_DATASEC: return (long)(vlen * sizeof(struct btf_var_secinfo));
  case BTF_KIND_DECL_TAG: return (long)sizeof(struct btf_decl_tag);
  case BTF_KIND_ENUM64: return (long)(vlen * sizeof(struct btf_enum64));
  default: return -1;
  }
}

/* Reads a whole file (sysfs files may report a size of 0 or 4096, so it
 * reads to EOF). Returns 0, or -1 with errno set. */
static int slurp(const char *path, unsigned char **out, size_t *len) {
  FILE *f = fopen(path, "rbe");
  if (!f) return -1;
  size_t cap = 1u << 20, n = 0;
  unsigned char *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    errno = ENOMEM;
    return -1;
  }
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_BTF_SIZE) {
        free(buf);
        fclose(f);
        errno = EFBIG;
        return -1;
      }
      unsigned char *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        fclose(f);
        errno = ENOMEM;
        return -1;
      }
      buf = bigger;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) {
        int err = errno ? errno : EIO;
        free(buf);
        fclose(f);
        errno = err;
        return -1;
      }
      break;
    }
  }
  fclose(f);
  *out = buf;
  *len = n;
  return 0;
}

/* Finds the first of TARGETS that is a BTF_KIND_FUNC whose type is a
 * BTF_KIND_FUNC_PROTO in the BTF blob. Returns its index in TARGETS and sets
 * *id, or returns -1 after printing why. Every offset is checked against the
 * blob before it is read. */
static int btf_find_target(const unsigned char *data, size_t size, uint32_t *id) {
  struct btf_header h;
  if (size < sizeof h) {
    fprintf(stderr, "ktprobe: %s: %zu bytes, shorter than a BTF header\n", BTF_PATH, size);
    return -1;
  }
  memcpy(&h, data, sizeof h);
  if (h.magic != BTF_MAGIC || h.version != BTF_VERSION || h.hdr_len < sizeof h || h.hdr_len > size) {
    fprintf(stderr, "ktprobe: %s: not native-endian BTF v%d (magic 0x%x, version %u, hdr_len %u)\n", BTF_PATH,
            BTF_VERSION, h.magic, h.version, h.hdr_len);
    return -1;
  }
  uint64_t body = size - h.hdr_len;
  if ((uint64_t)h.type_off + h.type_len > body || (uint64_t)h.str_off + h.str_len > body || h.type_off % 4 ||
      h.str_len == 0) {
    fprintf(stderr, "ktprobe: %s: type or string section outside the file\n", BTF_PATH);
    return -1;
  }
  const unsigned char *types = data + h.hdr_len + h.type_off;
  const char *strs = (const char *)data + h.hdr_len + h.str_off;
  if (strs[h.str_len - 1] != '\0') {
    fprintf(stderr, "ktprobe: %s: string section not NUL-terminated\n", BTF_PATH);
    return -1;
  }
  /* Offsets of every type by id (ids start at 1), to look up the prototypes. */
  size_t max_types = h.type_len / sizeof(struct btf_type) + 2, ntypes = 1;
  uint32_t *offs = calloc(max_types, sizeof *offs);
  if (!offs) {
    fprintf(stderr, "ktprobe: out of memory parsing BTF\n");
    return -1;
  }
  uint32_t found[N_TARGETS] = {0};
  size_t pos = 0;
  while (pos < h.type_len) {
    struct btf_type t;
    if (h.type_len - pos < sizeof t || ntypes >= max_types) {
      fprintf(stderr, "ktprobe: %s: truncated type at offset %zu\n", BTF_PATH, pos);
      free(offs);
      return -1;
    }
    memcpy(&t, types + pos, sizeof t);
    uint32_t kind = BTF_INFO_KIND(t.info), vlen = BTF_INFO_VLEN(t.info);
    long extra = btf_extra(kind, vlen);
    if (extra < 0 || h.type_len - pos - sizeof t < (size_t)extra || t.name_off >= h.str_len) {
      fprintf(stderr, "ktprobe: %s: bad type %zu (kind %u, vlen %u) at offset %zu\n", BTF_PATH, ntypes, kind, vlen,
              pos);
      free(offs);
      return -1;
    }
    offs[ntypes] = (uint32_t)pos;
    if (kind == BTF_KIND_FUNC) {
      const char *name = strs + t.name_off;
      for (size_t k = 0; k < N_TARGETS; ++k)
        if (!found[k] && strcmp(name, TARGETS[k].func) == 0) found[k] = (uint32_t)ntypes;
    }
    ++ntypes;
    pos += sizeof t + (size_t)extra;
  }
  for (size_t k = 0; k < N_TARGETS; ++k) {
    if (!found[k]) continue;
    struct btf_type fn, proto;
    memcpy(&fn, types + offs[found[k]], sizeof fn);
    if (fn.type == 0 || fn.type >= ntypes) continue;
    memcpy(&proto, types + offs[fn.type], sizeof proto);
    if (BTF_INFO_KIND(proto.info) != BTF_KIND_FUNC_PROTO) continue;
    *id = found[k];
    free(offs);
    return (int)k;
  }
  free(offs);
  fprintf(stderr, "ktprobe: %s: none of", BTF_PATH);
  for (size_t k = 0; k < N_TARGETS; ++k) fprintf(stderr, " %s", TARGETS[k].func);
  fprintf(stderr, " is a BTF_KIND_FUNC with a prototype\n");
  return -1;
}

/* ---- programs ---- */

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static struct bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int32_t imm) {
  struct bpf_insn i;
  memset(&i, 0, sizeof i);
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.imm = imm;
  return i;
}

/* Writes the body of program `index` into insns (room for MAX_ALU + 2) and
 * returns its length: n ALU ops (2..64) on r0 and r2..r9 (never r1, the
 * context, and never a register before it is written), r0 = ret, exit. No
 * division, and shift counts below the operand width, so every body passes
 * the verifier for every program type. */
static size_t build_body(struct bpf_insn *insns, uint64_t seed, uint64_t index, int32_t ret) {
  static const uint8_t regs[] = {BPF_REG_0, BPF_REG_2, BPF_REG_3, BPF_REG_4, BPF_REG_5,
                                 BPF_REG_6, BPF_REG_7, BPF_REG_8, BPF_REG_9};
  static const uint8_t ops[] = {BPF_ADD, BPF_SUB, BPF_MUL, BPF_OR,  BPF_AND,
                                BPF_XOR, BPF_LSH, BPF_RSH, BPF_ARSH, BPF_MOV};
  uint64_t s = mix64(seed ^ mix64(index));
  size_t n_alu = MIN_ALU + (size_t)(s % (MAX_ALU - MIN_ALU + 1));
  unsigned written = 0; /* bit i: regs[i] holds a value */
  for (size_t i = 0; i < n_alu; ++i) {
    s = mix64(s);
    unsigned r = (unsigned)(s % sizeof regs), r2 = (unsigned)((s >> 8) % sizeof regs);
    uint8_t op = ops[(s >> 16) % sizeof ops];
    uint8_t cls = (s >> 24) & 1 ? BPF_ALU64 : BPF_ALU;
    int32_t imm = (s >> 25) & 1 ? (int32_t)(int8_t)(s >> 32) : (int32_t)(uint32_t)(s >> 32);
    if (!(written & (1u << r))) op = BPF_MOV;
    if (op == BPF_LSH || op == BPF_RSH || op == BPF_ARSH) {
      imm = (int32_t)((uint32_t)imm % (cls == BPF_ALU64 ? 64u : 32u));
      insns[i] = insn((uint8_t)(cls | op | BPF_K), regs[r], 0, imm);
    } else if ((s >> 26) & 1 && (written & (1u << r2)) && op != BPF_MUL) {
      insns[i] = insn((uint8_t)(cls | op | BPF_X), regs[r], regs[r2], 0);
    } else {
      insns[i] = insn((uint8_t)(cls | op | BPF_K), regs[r], 0, imm);
    }
    written |= 1u << r;
  }
  insns[n_alu] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, ret);
  insns[n_alu + 1] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0);
  return n_alu + 2;
}

/* "kts_<kind>_<index>", the kind cut to fit BPF_OBJ_NAME_LEN - 1 characters. */
static void prog_name(char out[BPF_OBJ_NAME_LEN], const char *kind, uint64_t index) {
  char digits[24];
  int nd = snprintf(digits, sizeof digits, "%" PRIu64, index);
  int room = BPF_OBJ_NAME_LEN - 1 - (int)strlen("kts__") - nd;
  if (room < 1) room = 1; /* unreachable with index < MAX_COUNT */
  char full[64];
  snprintf(full, sizeof full, "kts_%.*s_%s", room, kind, digits);
  memset(out, 0, BPF_OBJ_NAME_LEN);
  memcpy(out, full, strnlen(full, BPF_OBJ_NAME_LEN - 1));
}

/* BPF_PROG_LOAD; with log != NULL, asks for the verifier log. Returns the fd or -1. */
static int prog_load(const struct kind *k, const struct bpf_insn *insns, size_t n, const char *name, uint32_t btf_id,
                     char *log, size_t log_size) {
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.prog_type = k->prog_type;
  attr.expected_attach_type = k->attach_type;
  attr.insns = (uint64_t)(uintptr_t)insns;
  attr.insn_cnt = (uint32_t)n;
  attr.license = (uint64_t)(uintptr_t) "GPL";
  if (k->tracing) attr.attach_btf_id = btf_id;
  if (log) {
    log[0] = '\0';
    attr.log_buf = (uint64_t)(uintptr_t)log;
    attr.log_size = (uint32_t)log_size;
    attr.log_level = 1;
  }
  memcpy(attr.prog_name, name, strnlen(name, sizeof attr.prog_name - 1));
  int fd;
  /* The kernel may return EAGAIN under memory pressure; libbpf retries too. */
  for (int tries = 0;; ++tries) {
    fd = (int)bpf_sys(BPF_PROG_LOAD, &attr);
    if (fd >= 0 || errno != EAGAIN || tries >= 4) break;
  }
  return fd;
}

struct jit {
  uint32_t id;
  uint8_t tag[BPF_TAG_SIZE];
  char name[BPF_OBJ_NAME_LEN];
  uint64_t addr;
  uint32_t len;
  unsigned char *bytes; /* grows as needed; owned by the caller */
  size_t cap;
};

/* BPF_OBJ_GET_INFO_BY_FD twice: lengths, then the JIT bytes and addresses.
 * Returns 0, or -1 after printing why. */
static int prog_jit_info(int fd, struct jit *j) {
  struct bpf_prog_info info;
  union bpf_attr attr;
  memset(&info, 0, sizeof info);
  memset(&attr, 0, sizeof attr);
  attr.info.bpf_fd = (uint32_t)fd;
  attr.info.info_len = sizeof info;
  attr.info.info = (uint64_t)(uintptr_t)&info;
  if (bpf_sys(BPF_OBJ_GET_INFO_BY_FD, &attr) != 0) {
    fprintf(stderr, "ktprobe: BPF_OBJ_GET_INFO_BY_FD: %s\n", strerror(errno));
    return -1;
  }
  uint32_t len = info.jited_prog_len, nr = info.nr_jited_ksyms;
  if (len == 0 || nr == 0) {
    fprintf(stderr, "ktprobe: program id %u was not JIT-compiled (net.core.bpf_jit_enable=0?)\n", info.id);
    return -1;
  }
  if (len > j->cap) {
    unsigned char *bigger = realloc(j->bytes, len);
    if (!bigger) {
      fprintf(stderr, "ktprobe: out of memory for %u JIT bytes\n", len);
      return -1;
    }
    j->bytes = bigger;
    j->cap = len;
  }
  uint64_t ksyms[MAX_KSYMS] = {0};
  memset(&info, 0, sizeof info);
  info.jited_prog_len = len;
  info.jited_prog_insns = (uint64_t)(uintptr_t)j->bytes;
  info.nr_jited_ksyms = nr < MAX_KSYMS ? nr : MAX_KSYMS;
  info.jited_ksyms = (uint64_t)(uintptr_t)ksyms;
  memset(&attr, 0, sizeof attr);
  attr.info.bpf_fd = (uint32_t)fd;
  attr.info.info_len = sizeof info;
  attr.info.info = (uint64_t)(uintptr_t)&info;
  if (bpf_sys(BPF_OBJ_GET_INFO_BY_FD, &attr) != 0) {
    fprintf(stderr, "ktprobe: BPF_OBJ_GET_INFO_BY_FD: %s\n", strerror(errno));
    return -1;
  }
  /* Without raw-dump permission (kptr_restrict) the kernel zeroes these. */
  if (info.jited_prog_insns == 0 || info.jited_ksyms == 0 || ksyms[0] == 0) {
    fprintf(stderr, "ktprobe: the kernel hides JIT bytes or addresses (kernel.kptr_restrict?)\n");
    return -1;
  }
  j->id = info.id;
  memcpy(j->tag, info.tag, sizeof j->tag);
  memcpy(j->name, info.name, sizeof j->name);
  j->name[sizeof j->name - 1] = '\0';
  j->addr = ksyms[0];
  j->len = info.jited_prog_len < len ? info.jited_prog_len : len;
  return 0;
}

static void write_hex(FILE *out, const unsigned char *p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  char chunk[512];
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    chunk[k++] = digits[p[i] >> 4];
    chunk[k++] = digits[p[i] & 15];
    if (k == sizeof chunk) {
      fwrite(chunk, 1, k, out);
      k = 0;
    }
  }
  fwrite(chunk, 1, k, out);
}

/* Closes every link and program of the batch; returns the microseconds spent. */
static uint64_t close_batch(int *progs, int *links, unsigned *used) {
  uint64_t t0 = now_us();
  for (unsigned i = 0; i < *used; ++i) {
    if (links[i] >= 0) close(links[i]);
    if (progs[i] >= 0) close(progs[i]);
    links[i] = progs[i] = -1;
  }
  *used = 0;
  return now_us() - t0;
}

static int usage(void) {
  fprintf(stderr,
          "usage: ktprobe bpf-stress --count N --out FILE [--kinds LIST] [--batch K] [--seed S] [--calls C]\n"
          "  N 1..%u; LIST comma-separated from socket,xdp,tracepoint,kprobe,fentry,fexit (default all);\n"
          "  K 1..%u (default 16); S any u64 (default 1); C 1..1000000 (default 1)\n",
          MAX_COUNT, MAX_BATCH);
  return 2;
}

/* Parses LIST into kinds[]; returns how many, or -1. */
static int parse_kinds(const char *list, int *kinds) {
  int n = 0;
  const char *p = list;
  for (;;) {
    size_t len = strcspn(p, ",");
    int k = -1;
    for (int i = 0; i < K_NR; ++i)
      if (strlen(KINDS[i].name) == len && strncmp(p, KINDS[i].name, len) == 0) k = i;
    if (k < 0 || n >= MAX_KIND_LIST) {
      fprintf(stderr, "ktprobe: --kinds: unknown kind '%.*s' (or more than %d entries)\n", (int)len, p,
              MAX_KIND_LIST);
      return -1;
    }
    kinds[n++] = k;
    if (p[len] == '\0') return n;
    p += len + 1;
  }
}

int bpf_stress(int argc, char **argv) {
  uint64_t count = 0, batch = 16, seed = 1, calls = 1;
  const char *out_path = NULL, *kind_list = "socket,xdp,tracepoint,kprobe,fentry,fexit";
  for (int i = 0; i < argc; ++i) {
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!val) return usage();
    if (strcmp(argv[i], "--count") == 0 && !parse_num(val, &count)) ++i;
    else if (strcmp(argv[i], "--batch") == 0 && !parse_num(val, &batch)) ++i;
    else if (strcmp(argv[i], "--seed") == 0 && !parse_num(val, &seed)) ++i;
    else if (strcmp(argv[i], "--calls") == 0 && !parse_num(val, &calls)) ++i;
    else if (strcmp(argv[i], "--out") == 0) out_path = argv[++i];
    else if (strcmp(argv[i], "--kinds") == 0) kind_list = argv[++i];
    else return usage();
  }
  if (!out_path || count < 1 || count > MAX_COUNT || batch < 1 || batch > MAX_BATCH || calls < 1 || calls > 1000000)
    return usage();
  int kinds[MAX_KIND_LIST];
  int nkinds = parse_kinds(kind_list, kinds);
  if (nkinds < 0) return 2;

  uint64_t t_start = now_us();
  int need_btf = 0;
  for (int i = 0; i < nkinds; ++i) need_btf |= KINDS[kinds[i]].tracing;
  uint32_t btf_id = 0;
  int target = -1;
  if (need_btf) {
    unsigned char *btf;
    size_t btf_size;
    if (slurp(BTF_PATH, &btf, &btf_size) != 0) {
      fprintf(stderr, "ktprobe: read %s: %s\n", BTF_PATH, strerror(errno));
      return 1;
    }
    target = btf_find_target(btf, btf_size, &btf_id);
    free(btf);
    if (target < 0) return 1;
  }

  FILE *out = fopen(out_path, "we");
  if (!out) {
    fprintf(stderr, "ktprobe: open %s: %s\n", out_path, strerror(errno));
    return 1;
  }
  static char outbuf[1u << 20];
  setvbuf(out, outbuf, _IOFBF, sizeof outbuf);

  static int progs[MAX_BATCH], links[MAX_BATCH];
  for (unsigned i = 0; i < MAX_BATCH; ++i) progs[i] = links[i] = -1;
  unsigned used = 0;
  uint64_t loaded = 0, failed = 0, by_kind[K_NR] = {0}, attached = 0;
  uint64_t load_us = 0, unload_us = 0, attach_us = 0;
  struct jit j;
  memset(&j, 0, sizeof j);
  struct bpf_insn insns[MAX_ALU + 2];
  char *log = NULL;

  for (uint64_t idx = 0; idx < count; ++idx) {
    const struct kind *k = &KINDS[kinds[idx % (uint64_t)nkinds]];
    char name[BPF_OBJ_NAME_LEN];
    prog_name(name, k->name, idx);
    size_t n = build_body(insns, seed, idx, k->ret);

    uint64_t t0 = now_us();
    int fd = prog_load(k, insns, n, name, btf_id, NULL, 0);
    load_us += now_us() - t0;
    if (fd < 0) {
      int err = errno;
      failed++;
      /* Again with the verifier log (not asked for before: it slows every load). */
      const char *why = "(no memory for the log)";
      log = malloc(LOG_SIZE);
      if (log) {
        int again = prog_load(k, insns, n, name, btf_id, log, LOG_SIZE);
        if (again >= 0) {
          close(again);
          why = "(none: the program loaded when tried again)";
        } else {
          why = log[0] ? log : "(empty: refused before the verifier ran)";
        }
      }
      fprintf(stderr, "ktprobe: BPF_PROG_LOAD %s (program %" PRIu64 ", %s, %zu insns): %s\nverifier log:\n%s\n", name,
              idx, k->name, n, strerror(err), why);
      break;
    }
    progs[used] = fd;
    links[used] = -1;
    used++;
    if (prog_jit_info(fd, &j) != 0) {
      failed++;
      break;
    }
    if (strcmp(j.name, name) != 0) {
      fprintf(stderr, "ktprobe: program %" PRIu64 " id %u: kernel reports name '%s', loaded as '%s'\n", idx, j.id,
              j.name, name);
      failed++;
      break;
    }
    fprintf(out, "prog %" PRIu64 " %u %s 0x%" PRIx64 " %u ", idx, j.id, k->name, j.addr, j.len);
    write_hex(out, j.bytes, j.len);
    fputc('\n', out);
    if (k->tracing) {
      /* A raw_tracepoint_open with no name attaches a tracing program to its
       * attach_btf_id: the kernel builds a trampoline for the function. */
      t0 = now_us();
      union bpf_attr attr;
      memset(&attr, 0, sizeof attr);
      attr.raw_tracepoint.prog_fd = (uint32_t)fd;
      int link = (int)bpf_sys(BPF_RAW_TRACEPOINT_OPEN, &attr);
      if (link < 0) {
        fprintf(stderr, "ktprobe: attach %s (program %" PRIu64 ", id %u) to %s: %s\n", name, idx, j.id,
                TARGETS[target].func, strerror(errno));
        failed++;
        break;
      }
      links[used - 1] = link;
      for (uint64_t c = 0; c < calls; ++c)
        syscall(TARGETS[target].sysno, TARGETS[target].arg, 0L); /* run the trampoline */
      close(link);                    /* detach: the trampoline is freed */
      links[used - 1] = -1;
      attach_us += now_us() - t0;
      attached++;
    }
    loaded++;
    by_kind[k - KINDS]++;
    if (used == batch) unload_us += close_batch(progs, links, &used);
  }
  unload_us += close_batch(progs, links, &used);
  free(j.bytes);
  free(log);

  int write_failed = fflush(out) != 0 || ferror(out);
  int write_err = errno;
  if (fclose(out) != 0 && !write_failed) {
    write_failed = 1;
    write_err = errno;
  }
  if (write_failed) fprintf(stderr, "ktprobe: write %s: %s\n", out_path, strerror(write_err));

  double seconds = (double)(now_us() - t_start) / 1e6;
  printf("{\"loaded\":%" PRIu64 ",\"by_kind\":{", loaded);
  int first = 1;
  for (int kk = 0; kk < K_NR; ++kk) {
    int listed = 0;
    for (int i = 0; i < nkinds; ++i) listed |= kinds[i] == kk;
    if (!listed) continue;
    printf("%s\"%s\":%" PRIu64, first ? "" : ",", KINDS[kk].name, by_kind[kk]);
    first = 0;
  }
  printf("},\"failed\":%" PRIu64 ",\"seconds\":%.3f,\"load_us_total\":%" PRIu64 ",\"unload_us_total\":%" PRIu64
         ",\"attach_us_total\":%" PRIu64 ",\"attached\":%" PRIu64 ",\"batch\":%" PRIu64 ",\"seed\":%" PRIu64,
         failed, seconds, load_us, unload_us, attach_us, attached, batch, seed);
  if (target >= 0) printf(",\"trace_func\":\"%s\",\"trace_btf_id\":%u", TARGETS[target].func, btf_id);
  printf("}\n");
  fflush(stdout);
  return failed || write_failed ? 1 : 0;
}
