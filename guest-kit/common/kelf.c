#define _GNU_SOURCE
#include "kelf.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int read_at(int fd, uint64_t off, void *buf, size_t len, uint64_t file_size) {
  if (off > file_size || len > file_size - off) return -1;
  return pread(fd, buf, len, (off_t)off) == (ssize_t)len ? 0 : -1;
}

int kelf_section_size(const char *path, const char *name, uint64_t *size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = -1;
  struct stat st;
  Elf64_Ehdr eh;
  char *names = NULL;
  if (fstat(fd, &st) != 0) goto out;
  uint64_t fsize = (uint64_t)st.st_size;
  if (read_at(fd, 0, &eh, sizeof eh, fsize) != 0) goto out;
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      eh.e_shstrndx >= eh.e_shnum)
    goto out;
  Elf64_Shdr strsec;
  if (read_at(fd, eh.e_shoff + (uint64_t)eh.e_shstrndx * sizeof strsec, &strsec, sizeof strsec, fsize) != 0) goto out;
  if (strsec.sh_size == 0 || strsec.sh_size > (1u << 20)) goto out;
  names = malloc(strsec.sh_size + 1);
  if (!names || read_at(fd, strsec.sh_offset, names, strsec.sh_size, fsize) != 0) goto out;
  names[strsec.sh_size] = '\0';
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    if (read_at(fd, eh.e_shoff + (uint64_t)i * sizeof sh, &sh, sizeof sh, fsize) != 0) goto out;
    if (sh.sh_name >= strsec.sh_size) continue;
    if (strcmp(names + sh.sh_name, name) == 0) {
      *size = sh.sh_size;
      rc = 0;
      break;
    }
  }
out:
  free(names);
  close(fd);
  return rc;
}

static int same_module_name(const char *file, const char *name) {
  size_t n = strlen(name);
  if (strlen(file) != n + 3 || strcmp(file + n, ".ko") != 0) return 0;
  for (size_t i = 0; i < n; ++i) {
    char a = file[i] == '-' ? '_' : file[i], b = name[i] == '-' ? '_' : name[i];
    if (a != b) return 0;
  }
  return 1;
}

static int search(const char *dir, const char *name, int depth, int *budget, char *out, size_t out_len) {
  if (depth > 8 || *budget <= 0) return -1;
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  int rc = -1;
  while (rc != 0 && (e = readdir(d)) != NULL && --*budget > 0) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
    if (e->d_type == DT_DIR) {
      rc = search(path, name, depth + 1, budget, out, out_len);
    } else if (same_module_name(e->d_name, name) && strlen(path) < out_len) {
      memcpy(out, path, strlen(path) + 1);
      rc = 0;
    }
  }
  closedir(d);
  return rc;
}

/* modules.dep, as depmod writes it: one "path/NAME.ko: deps..." line per
 * module, the path relative to the release's directory. One sequential read
 * instead of a walk of the whole tree: a distribution kernel has thousands of
 * modules in hundreds of directories, and on a guest's disk that walk took
 * longer than a guard hold may wait (ktguest does this between relays). */
static int from_modules_dep(const char *root, const char *name, char *out, size_t out_len) {
  char path[600], line[1024];
  if ((size_t)snprintf(path, sizeof path, "%s/modules.dep", root) >= sizeof path) return -1;
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  int rc = -1;
  while (rc != 0 && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;  /* also the tail of a line longer than the buffer */
    *colon = 0;
    const char *slash = strrchr(line, '/');
    if (!same_module_name(slash ? slash + 1 : line, name)) continue;
    if ((size_t)snprintf(out, out_len, "%s/%s", root, line) < out_len) rc = 0;
  }
  fclose(f);
  return rc;
}

int kelf_find_module_file(const char *release, const char *name, char *out, size_t out_len) {
  char root[512];
  int budget = 200000;
  if (search("/lib/kthost-test", name, 0, &budget, out, out_len) == 0) return 0;
  snprintf(root, sizeof root, "/lib/modules/%s", release);
  if (from_modules_dep(root, name, out, out_len) == 0) return 0;
  /* No modules.dep (the test initramfs has none), or a module depmod has not
   * indexed yet: the bounded walk. */
  return search(root, name, 0, &budget, out, out_len);
}
