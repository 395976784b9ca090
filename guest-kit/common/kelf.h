/* Small, bounds-checked ELF64 helpers for guest-kit: section sizes of kernel
 * module files, and finding a loaded module's file. */
#ifndef KTHOST_KELF_H
#define KTHOST_KELF_H

#include <stddef.h>
#include <stdint.h>

/* Size of section `name` in the ELF64 file at `path`. Returns 0 and sets
 * *size, or -1 when the file is unreadable, not ELF64 little-endian, or has
 * no such section. Every offset and count is checked against the file. */
int kelf_section_size(const char *path, const char *name, uint64_t *size);

/* Finds the .ko file of module `name` (as /proc/modules spells it: '_' and
 * '-' are equivalent) in /lib/kthost-test, then in /lib/modules/<release>:
 * by its modules.dep where there is one, else by a walk bounded in depth and
 * entries. Returns 0 and writes the path, else -1. */
int kelf_find_module_file(const char *release, const char *name, char *out, size_t out_len);

#endif
