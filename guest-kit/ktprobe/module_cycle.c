/* ktprobe module-cycle --count N --module FILE --name NAME
 *
 * Loads FILE with finit_module and unloads NAME with delete_module, N times;
 * prints one JSON line: load and unload times in microseconds (median, p99,
 * max, mean). Exits 1 on the first failure, saying which call failed. */
#define _GNU_SOURCE
#include "module_cycle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void print_stats(const char *name, double *v, unsigned n) {
  qsort(v, n, sizeof *v, cmp);
  double sum = 0;
  for (unsigned i = 0; i < n; ++i) sum += v[i];
  unsigned p99 = (unsigned)((double)(n - 1) * 0.99 + 0.5);
  printf("\"%s\":{\"median\":%.1f,\"p99\":%.1f,\"max\":%.1f,\"mean\":%.1f}", name, v[(n - 1) / 2], v[p99],
         v[n - 1], sum / n);
}

int module_cycle(int argc, char **argv) {
  unsigned long count = 0;
  const char *file = NULL, *name = NULL;
  for (int i = 0; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--count") == 0) count = strtoul(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--module") == 0) file = argv[i + 1];
    else if (strcmp(argv[i], "--name") == 0) name = argv[i + 1];
    else count = 0;
  }
  if (count == 0 || count > 100000 || !file || !name || argc % 2) {
    fprintf(stderr, "usage: ktprobe module-cycle --count N (1..100000) --module FILE --name NAME\n");
    return 2;
  }
  double *load = calloc(count, sizeof *load), *unload = calloc(count, sizeof *unload);
  if (!load || !unload) return 1;
  for (unsigned long i = 0; i < count; ++i) {
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      fprintf(stderr, "ktprobe: open %s: %s\n", file, strerror(errno));
      return 1;
    }
    double t0 = now_us();
    if (syscall(SYS_finit_module, fd, "", 0) != 0) {
      fprintf(stderr, "ktprobe: finit_module %s (cycle %lu): %s\n", file, i, strerror(errno));
      return 1;
    }
    double t1 = now_us();
    close(fd);
    if (syscall(SYS_delete_module, name, O_NONBLOCK) != 0) {
      fprintf(stderr, "ktprobe: delete_module %s (cycle %lu): %s\n", name, i, strerror(errno));
      return 1;
    }
    double t2 = now_us();
    load[i] = t1 - t0;
    unload[i] = t2 - t1;
  }
  printf("{\"count\":%lu,", count);
  print_stats("load_us", load, (unsigned)count);
  printf(",");
  print_stats("unload_us", unload, (unsigned)count);
  printf("}\n");
  free(load);
  free(unload);
  return 0;
}
