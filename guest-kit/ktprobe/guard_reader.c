/* ktprobe guard-reader: a stand-in for ktguest's ktguard relay, for tests.
 * Reads notices from /dev/ktguard, optionally copies the named text out of
 * /proc/kcore (what the host does from guest RAM), and acks each one, late
 * or never when asked to, so that a test can drive the module's timeout.
 * Prints one JSON line per notice and a summary line at the end. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "guard_reader.h"
#include "ktguard_uapi.h"

#define MAX_PHDRS 4096
#define MAX_COPY (16u << 20)

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

struct kcore {
  int fd;
  Elf64_Phdr *ph;
  unsigned n;
};

static int kcore_open(struct kcore *k) {
  Elf64_Ehdr eh;
  k->fd = open("/proc/kcore", O_RDONLY | O_CLOEXEC);
  if (k->fd < 0 || pread(k->fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) return -1;
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS)
    return -1;
  k->n = eh.e_phnum;
  k->ph = calloc(k->n, sizeof *k->ph);
  if (!k->ph) return -1;
  size_t want = k->n * sizeof *k->ph;
  return pread(k->fd, k->ph, want, (off_t)eh.e_phoff) == (ssize_t)want ? 0 : -1;
}

/* Copies [start, start+len) and returns 0, or -1 when kcore cannot serve it. */
static int kcore_copy(const struct kcore *k, uint64_t start, uint64_t len, unsigned char *out) {
  for (unsigned i = 0; i < k->n; ++i) {
    const Elf64_Phdr *p = &k->ph[i];
    if (p->p_type != PT_LOAD || start < p->p_vaddr || start - p->p_vaddr >= p->p_filesz ||
        len > p->p_filesz - (start - p->p_vaddr))
      continue;
    return pread(k->fd, out, len, (off_t)(p->p_offset + (start - p->p_vaddr))) == (ssize_t)len ? 0 : -1;
  }
  return -1;
}

static int usage(void) {
  fprintf(stderr, "usage: ktprobe guard-reader --seconds S [--no-ack] [--delay-ms MS] [--copy]\n");
  return 2;
}

int guard_reader(int argc, char **argv) {
  unsigned long seconds = 0, delay_ms = 0;
  int ack = 1, copy = 0;
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = strtoul(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--delay-ms") == 0 && i + 1 < argc) delay_ms = strtoul(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--no-ack") == 0) ack = 0;
    else if (strcmp(argv[i], "--copy") == 0) copy = 1;
    else return usage();
  }
  if (seconds == 0 || seconds > 3600) return usage();
  struct kcore k = {-1, NULL, 0};
  if (copy && kcore_open(&k) != 0) {
    fprintf(stderr, "ktprobe: cannot use /proc/kcore: %s\n", strerror(errno));
    return 1;
  }
  unsigned char *buf = copy ? malloc(MAX_COPY) : NULL;
  if (copy && !buf) return 1;
  int fd = open(KTGUARD_DEVICE, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    fprintf(stderr, "ktprobe: open %s: %s\n", KTGUARD_DEVICE, strerror(errno));
    return 1;
  }
  printf("{\"event\":\"ready\"}\n");
  fflush(stdout);
  uint64_t end = now_ms() + seconds * 1000u, notices = 0, acked = 0, copied = 0;
  for (;;) {
    uint64_t t = now_ms();
    if (t >= end) break;
    struct pollfd pfd = {fd, POLLIN, 0};
    int r = poll(&pfd, 1, (int)(end - t));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) { perror("ktprobe: poll"); break; }
    if (r == 0) continue;
    struct ktguard_notice n[16];
    ssize_t got = read(fd, n, sizeof n);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got < 0) { perror("ktprobe: read"); break; }
    for (size_t i = 0; i < (size_t)got / sizeof n[0]; ++i) {
      ++notices;
      uint32_t status = 0;
      char head[40] = "";
      uint64_t len = n[i].end - n[i].start, not_int3 = 0;
      if (copy) {
        if (len <= MAX_COPY && kcore_copy(&k, n[i].start, len, buf) == 0) {
          ++copied;
          for (int b = 0; b < 16 && (uint64_t)b < len; ++b) sprintf(head + 2 * b, "%02x", buf[b]);
          /* Freed BPF text is filled with int3: a copy with other bytes
           * was taken before the free. */
          for (uint64_t b = 0; b < len; ++b) not_int3 += buf[b] != 0xcc;
        } else {
          status = 1;
        }
      }
      printf("{\"id\":%" PRIu64 ",\"start\":\"0x%" PRIx64 "\",\"end\":\"0x%" PRIx64
             "\",\"len\":%" PRIu64 ",\"kind\":%u,\"cpu\":%u,\"time_ns\":%" PRIu64
             ",\"head\":\"%s\",\"not_int3\":%" PRIu64 ",\"status\":%u,\"acked\":%s}\n",
             (uint64_t)n[i].id, (uint64_t)n[i].start, (uint64_t)n[i].end, len, n[i].kind, n[i].cpu,
             (uint64_t)n[i].time_ns, head, not_int3, status,
             ack ? "true" : "false");
      fflush(stdout);
      if (!ack) continue;
      if (delay_ms) usleep((useconds_t)delay_ms * 1000u);
      struct ktguard_ack a = {n[i].id, status, 0};
      if (write(fd, &a, sizeof a) == (ssize_t)sizeof a) ++acked;
      else perror("ktprobe: write ack");
    }
  }
  printf("{\"event\":\"done\",\"notices\":%" PRIu64 ",\"acked\":%" PRIu64 ",\"copied\":%" PRIu64 "}\n",
         notices, acked, copied);
  close(fd);
  free(buf);
  return 0;
}
