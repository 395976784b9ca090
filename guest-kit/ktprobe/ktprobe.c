/* ktprobe: a guest-side oracle for kthost tests. Each subcommand asks the
 * guest kernel itself for a fact the host reconstructs from guest RAM, and
 * prints it as one JSON line on stdout.
 *
 *   ktprobe kcore-read ADDR LEN [--raw]
 *   ktprobe bpf-load [--insns N] [--name NAME] [--hold SECONDS]
 *   ktprobe phys-pattern --pages N [--hold SECONDS]
 *   ktprobe sideband-count --seconds S
 *   ktprobe guard-reader --seconds S [--no-ack] [--delay-ms MS] [--copy]
 *   ktprobe xdp-cycle [--ifindex N] [--rounds N]
 *   ktprobe bpf-stress --count N --out FILE [--kinds LIST] [--batch K] [--seed S]
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bpf_stress.h"
#include "guard_reader.h"
#include "kelf.h"
#include "module_cycle.h"
#include "xdp_cycle.h"

#define MAX_KCORE_READ (64u << 20)
#define MAX_PHDRS 4096
#define MAX_INSNS 4000
#define MAX_PAGES (1u << 20)
#define PAGE 4096u

/* Reports a failed call with errno and returns the exit status. */
static int die(const char *what) {
  fprintf(stderr, "ktprobe: %s: %s\n", what, strerror(errno));
  return 1;
}

static int parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end) return -1;
  *out = v;
  return 0;
}

static void print_hex(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; ++i) printf("%02x", p[i]);
}

static int pread_full(int fd, void *buf, size_t len, off_t off) {
  unsigned char *p = buf;
  while (len > 0) {
    ssize_t n = pread(fd, p, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
    off += n;
  }
  return 0;
}

static void hold(unsigned long seconds) {
  fflush(stdout);
  while (seconds > 0) seconds = sleep((unsigned)seconds);
}

/* ---- kcore-read ---- */

static int kcore_read(int argc, char **argv) {
  uint64_t addr, len;
  int raw = 0;
  if (argc < 2 || parse_u64(argv[0], &addr) || parse_u64(argv[1], &len)) {
    fprintf(stderr, "usage: ktprobe kcore-read ADDR LEN [--raw]\n");
    return 2;
  }
  if (argc > 2 && strcmp(argv[2], "--raw") == 0) raw = 1;
  if (len == 0 || len > MAX_KCORE_READ || addr + len < addr) {
    fprintf(stderr, "ktprobe: LEN must be 1..%u and not wrap\n", MAX_KCORE_READ);
    return 2;
  }
  int fd = open("/proc/kcore", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return die("open /proc/kcore");
  Elf64_Ehdr eh;
  if (pread_full(fd, &eh, sizeof eh, 0) != 0) return die("read /proc/kcore header");
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS) {
    fprintf(stderr, "ktprobe: /proc/kcore is not an ELF64 core with sane program headers\n");
    return 1;
  }
  Elf64_Phdr *ph = calloc(eh.e_phnum, sizeof *ph);
  if (!ph || pread_full(fd, ph, eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff) != 0)
    return die("read /proc/kcore program headers");
  const Elf64_Phdr *hit = NULL;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    if (ph[i].p_type != PT_LOAD) continue;
    if (addr >= ph[i].p_vaddr && addr - ph[i].p_vaddr < ph[i].p_filesz &&
        len <= ph[i].p_filesz - (addr - ph[i].p_vaddr)) {
      hit = &ph[i];
      break;
    }
  }
  if (!hit) {
    fprintf(stderr, "ktprobe: 0x%" PRIx64 "+%" PRIu64 " is not inside one PT_LOAD of /proc/kcore\n", addr, len);
    return 1;
  }
  unsigned char *buf = malloc(len);
  if (!buf) return die("malloc");
  if (pread_full(fd, buf, len, (off_t)(hit->p_offset + (addr - hit->p_vaddr))) != 0)
    return die("read /proc/kcore");
  if (raw) {
    fwrite(buf, 1, len, stdout);
  } else {
    printf("{\"addr\":\"0x%" PRIx64 "\",\"len\":%" PRIu64 ",\"hex\":\"", addr, len);
    print_hex(buf, len);
    printf("\"}\n");
  }
  free(buf);
  free(ph);
  close(fd);
  return 0;
}

/* ---- bpf-load ---- */

static long sys_bpf(int cmd, union bpf_attr *attr) {
  return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

static int bpf_load(int argc, char **argv) {
  uint64_t n_alu = 8, hold_s = 0;
  const char *name = "kthost_probe";
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--insns") == 0 && i + 1 < argc && !parse_u64(argv[i + 1], &n_alu)) ++i;
    else if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc && !parse_u64(argv[i + 1], &hold_s)) ++i;
    else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) name = argv[++i];
    else {
      fprintf(stderr, "usage: ktprobe bpf-load [--insns N] [--name NAME] [--hold SECONDS]\n");
      return 2;
    }
  }
  if (n_alu < 1 || n_alu > MAX_INSNS) {
    fprintf(stderr, "ktprobe: --insns must be 1..%u\n", MAX_INSNS);
    return 2;
  }
  /* The kernel accepts only [A-Za-z0-9_.]; checking here keeps the JSON clean too. */
  if (strlen(name) >= BPF_OBJ_NAME_LEN || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") !=
                                              strlen(name)) {
    fprintf(stderr, "ktprobe: --name must be < %d chars of [A-Za-z0-9_.]\n", BPF_OBJ_NAME_LEN);
    return 2;
  }
  /* r2 = 1; r2 += 1; r2 += 2; ... (n_alu ALU ops on r2, never on the ctx in r1), r0 = 0; exit */
  size_t count = n_alu + 2;
  struct bpf_insn *insns = calloc(count, sizeof *insns);
  if (!insns) return die("malloc");
  for (size_t i = 0; i < n_alu; ++i) {
    insns[i].code = (uint8_t)(BPF_ALU64 | (i == 0 ? BPF_MOV : BPF_ADD) | BPF_K);
    insns[i].dst_reg = BPF_REG_2;
    insns[i].imm = i == 0 ? 1 : (int32_t)i;
  }
  insns[n_alu].code = BPF_ALU64 | BPF_MOV | BPF_K;
  insns[n_alu].dst_reg = BPF_REG_0;
  insns[n_alu + 1].code = BPF_JMP | BPF_EXIT;

  static char log[65536];
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  attr.insns = (uint64_t)(uintptr_t)insns;
  attr.insn_cnt = (uint32_t)count;
  attr.license = (uint64_t)(uintptr_t) "GPL";
  attr.log_buf = (uint64_t)(uintptr_t)log;
  attr.log_size = sizeof log;
  attr.log_level = 1;
  strncpy(attr.prog_name, name, sizeof attr.prog_name - 1);
  int fd = (int)sys_bpf(BPF_PROG_LOAD, &attr);
  if (fd < 0) {
    int err = errno;
    fprintf(stderr, "ktprobe: BPF_PROG_LOAD: %s\n%s", strerror(err), log);
    return 1;
  }

  struct bpf_prog_info info;
  memset(&info, 0, sizeof info);
  memset(&attr, 0, sizeof attr);
  attr.info.bpf_fd = (uint32_t)fd;
  attr.info.info_len = sizeof info;
  attr.info.info = (uint64_t)(uintptr_t)&info;
  if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) != 0) return die("BPF_OBJ_GET_INFO_BY_FD");
  uint32_t jited_len = info.jited_prog_len, nr_ksyms = info.nr_jited_ksyms;
  if (jited_len == 0 || nr_ksyms == 0) {
    fprintf(stderr, "ktprobe: the program was not JIT-compiled (or the kernel hides JIT info)\n");
    return 1;
  }
  unsigned char *jited = calloc(jited_len, 1);
  uint64_t *ksyms = calloc(nr_ksyms, sizeof *ksyms);
  if (!jited || !ksyms) return die("malloc");
  memset(&info, 0, sizeof info);
  info.jited_prog_len = jited_len;
  info.jited_prog_insns = (uint64_t)(uintptr_t)jited;
  info.nr_jited_ksyms = nr_ksyms;
  info.jited_ksyms = (uint64_t)(uintptr_t)ksyms;
  memset(&attr, 0, sizeof attr);
  attr.info.bpf_fd = (uint32_t)fd;
  attr.info.info_len = sizeof info;
  attr.info.info = (uint64_t)(uintptr_t)&info;
  if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) != 0) return die("BPF_OBJ_GET_INFO_BY_FD");
  if (info.jited_prog_len < jited_len) jited_len = info.jited_prog_len;

  printf("{\"id\":%u,\"tag\":\"", info.id);
  print_hex(info.tag, sizeof info.tag);
  printf("\",\"name\":\"%s\",\"insn_cnt\":%zu,\"jited_len\":%u,\"jited_addr\":\"0x%" PRIx64 "\",\"jited_insns\":\"",
         info.name, count, jited_len, ksyms[0]);
  print_hex(jited, jited_len);
  printf("\"}\n");
  hold(hold_s);
  close(fd);
  free(jited);
  free(ksyms);
  free(insns);
  return 0;
}

/* ---- phys-pattern ----
 * Page i of the mapping holds, little-endian:
 *   bytes 0..7    "KTHOSTPG"
 *   bytes 8..15   u64 i
 *   bytes 16..23  u64 nonce (one getrandom value for the whole run)
 *   bytes 24..4095: 509 u64 words w[k], k = 0..508, from xorshift64
 *     s = nonce ^ ((i + 1) * 0x9E3779B97F4A7C15); if s == 0: s = 1
 *     for each k: s ^= s << 13; s ^= s >> 7; s ^= s << 17; w[k] = s
 */
static uint64_t pattern_seed(uint64_t nonce, uint64_t index) {
  uint64_t s = nonce ^ ((index + 1) * 0x9E3779B97F4A7C15ull);
  return s ? s : 1;
}

static void fill_page(unsigned char *page, uint64_t index, uint64_t nonce) {
  memcpy(page, "KTHOSTPG", 8);
  memcpy(page + 8, &index, 8);
  memcpy(page + 16, &nonce, 8);
  uint64_t s = pattern_seed(nonce, index);
  for (size_t off = 24; off + 8 <= PAGE; off += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    memcpy(page + off, &s, 8);
  }
}

static int phys_pattern(int argc, char **argv) {
  uint64_t pages = 0, hold_s = 0;
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--pages") == 0 && i + 1 < argc && !parse_u64(argv[i + 1], &pages)) ++i;
    else if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc && !parse_u64(argv[i + 1], &hold_s)) ++i;
    else {
      fprintf(stderr, "usage: ktprobe phys-pattern --pages N [--hold SECONDS]\n");
      return 2;
    }
  }
  if (pages < 1 || pages > MAX_PAGES) {
    fprintf(stderr, "ktprobe: --pages must be 1..%u\n", MAX_PAGES);
    return 2;
  }
  uint64_t nonce;
  if (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) return die("getrandom");
  size_t size = (size_t)pages * PAGE;
  unsigned char *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return die("mmap");
  /* Small pages keep one PFN per pattern page stable; a THP collapse could move them. */
  madvise(map, size, MADV_NOHUGEPAGE);
  for (uint64_t i = 0; i < pages; ++i) fill_page(map + i * PAGE, i, nonce);
  if (mlock(map, size) != 0) return die("mlock");
  int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pm < 0) return die("open /proc/self/pagemap");
  printf("{\"nonce\":\"0x%016" PRIx64 "\",\"page_size\":%u,\"pages\":[", nonce, PAGE);
  for (uint64_t i = 0; i < pages; ++i) {
    uint64_t entry;
    uint64_t vpn = (uint64_t)(uintptr_t)(map + i * PAGE) / PAGE;
    if (pread_full(pm, &entry, sizeof entry, (off_t)(vpn * 8)) != 0) return die("read /proc/self/pagemap");
    uint64_t pfn = entry & ((1ull << 55) - 1);
    if (!(entry >> 63) || pfn == 0) {
      fprintf(stderr, "\nktprobe: page %" PRIu64 " not present or PFN hidden (need CAP_SYS_ADMIN)\n", i);
      return 1;
    }
    printf("%s[%" PRIu64 ",%" PRIu64 "]", i ? "," : "", i, pfn);
  }
  printf("]}\n");
  close(pm);
  hold(hold_s);
  return 0;
}

/* ---- sideband-count ----
 * Counts the perf side-band records ktguest forwards, with its own per-CPU
 * dummy events and a parser of its own (an oracle must not share the code it
 * checks). Run a workload in the background meanwhile. */
#define SB_MAX_CPUS 256
#define SB_PAGES 256 /* 1 MiB per CPU, like ktguest */

static int sideband_count(int argc, char **argv) {
  uint64_t seconds = 0, n[4] = {0}; /* text_poke, ksymbol, bpf_event, lost */
  if (argc != 2 || strcmp(argv[0], "--seconds") != 0 || parse_u64(argv[1], &seconds) || !seconds || seconds > 3600) {
    fprintf(stderr, "usage: ktprobe sideband-count --seconds S (1..3600)\n");
    return 2;
  }
  static struct pollfd fds[SB_MAX_CPUS];
  static unsigned char *maps[SB_MAX_CPUS];
  int nfd = 0;
  size_t size = (size_t)SB_PAGES * PAGE;
  for (int cpu = 0; cpu < SB_MAX_CPUS; ++cpu) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_DUMMY;
    a.sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
    a.sample_id_all = a.ksymbol = a.bpf_event = a.text_poke = 1;
    a.watermark = 1;
    a.wakeup_watermark = (uint32_t)(size / 16);
    int fd = (int)syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) continue; /* offline or absent CPU */
    void *m = mmap(NULL, PAGE + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return die("mmap perf ring");
    fds[nfd] = (struct pollfd){fd, POLLIN, 0};
    maps[nfd++] = m;
  }
  if (nfd == 0) return die("perf_event_open");
  struct timeval t0, t;
  gettimeofday(&t0, NULL);
  for (int last = 0; !last;) {
    gettimeofday(&t, NULL);
    last = (uint64_t)(t.tv_sec - t0.tv_sec) >= seconds;
    if (!last) poll(fds, (nfds_t)nfd, 50);
    for (int i = 0; i < nfd; ++i) {
      struct perf_event_mmap_page *pg = (struct perf_event_mmap_page *)maps[i];
      unsigned char *data = maps[i] + PAGE;
      uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE), tail = pg->data_tail;
      while (head - tail >= 8) {
        struct perf_event_header h;
        uint64_t lost = 0;
        for (size_t k = 0; k < sizeof h; ++k) ((unsigned char *)&h)[k] = data[(tail + k) % size];
        if (h.size < sizeof h || h.size > head - tail) break;
        if (h.type == PERF_RECORD_TEXT_POKE) n[0]++;
        else if (h.type == PERF_RECORD_KSYMBOL) n[1]++;
        else if (h.type == PERF_RECORD_BPF_EVENT) n[2]++;
        else if (h.type == PERF_RECORD_LOST && h.size >= 24) {
          for (size_t k = 0; k < 8; ++k) ((unsigned char *)&lost)[k] = data[(tail + 16 + k) % size];
          n[3] += lost;
        }
        tail += h.size;
      }
      __atomic_store_n(&pg->data_tail, head, __ATOMIC_RELEASE);
    }
  }
  printf("{\"text_poke\":%" PRIu64 ",\"ksymbol\":%" PRIu64 ",\"bpf_event\":%" PRIu64 ",\"lost\":%" PRIu64
         ",\"cpus\":%d}\n", n[0], n[1], n[2], n[3], nfd);
  return 0;
}

/* Prints the size of one section of an ELF file (the test oracle for module
 * text ranges: .text of a .ko). */
static int elf_section(int argc, char **argv) {
  uint64_t size;
  if (argc != 2) {
    fprintf(stderr, "usage: ktprobe elf-section-size FILE SECTION\n");
    return 2;
  }
  if (kelf_section_size(argv[0], argv[1], &size) != 0) {
    fprintf(stderr, "ktprobe: %s: no section %s (or not ELF64)\n", argv[0], argv[1]);
    return 1;
  }
  printf("%llu\n", (unsigned long long)size);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "elf-section-size") == 0) return elf_section(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "kcore-read") == 0) return kcore_read(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "bpf-load") == 0) return bpf_load(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "phys-pattern") == 0) return phys_pattern(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "sideband-count") == 0) return sideband_count(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "guard-reader") == 0) return guard_reader(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "xdp-cycle") == 0) return xdp_cycle(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "bpf-stress") == 0) return bpf_stress(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "module-cycle") == 0) return module_cycle(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: ktprobe kcore-read ADDR LEN [--raw]\n"
          "       ktprobe elf-section-size FILE SECTION\n"
          "       ktprobe bpf-load [--insns N] [--name NAME] [--hold SECONDS]\n"
          "       ktprobe phys-pattern --pages N [--hold SECONDS]\n"
          "       ktprobe sideband-count --seconds S\n"
          "       ktprobe guard-reader --seconds S [--no-ack] [--delay-ms MS] [--copy]\n"
          "       ktprobe xdp-cycle [--ifindex N] [--rounds N]\n"
          "       ktprobe bpf-stress --count N --out FILE [--kinds LIST] [--batch K] [--seed S]\n"
          "       ktprobe module-cycle --count N --module FILE --name NAME\n");
  return 2;
}
