/* ktprobe xdp-cycle: attaches a trivial XDP program (generic mode) to an
 * interface through a BPF link, then closes the link. Each attach and detach
 * goes through bpf_dispatcher_change_prog, which rewrites half of the XDP
 * dispatcher image: a ktguard test drives that path with it. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xdp_cycle.h"

static long bpf_call(int cmd, union bpf_attr *attr) { return syscall(SYS_bpf, cmd, attr, sizeof *attr); }

int xdp_cycle(int argc, char **argv) {
  unsigned long ifindex = 1, rounds = 1;
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--ifindex") == 0 && i + 1 < argc) ifindex = strtoul(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = strtoul(argv[++i], NULL, 0);
    else {
      fprintf(stderr, "usage: ktprobe xdp-cycle [--ifindex N] [--rounds N]\n");
      return 2;
    }
  }
  struct bpf_insn insns[] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = XDP_PASS},
      {.code = BPF_JMP | BPF_EXIT},
  };
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.prog_type = BPF_PROG_TYPE_XDP;
  attr.insns = (uint64_t)(uintptr_t)insns;
  attr.insn_cnt = 2;
  attr.license = (uint64_t)(uintptr_t) "GPL";
  int prog = (int)bpf_call(BPF_PROG_LOAD, &attr);
  if (prog < 0) {
    fprintf(stderr, "ktprobe: BPF_PROG_LOAD (xdp): %s\n", strerror(errno));
    return 1;
  }
  for (unsigned long r = 0; r < rounds; ++r) {
    memset(&attr, 0, sizeof attr);
    attr.link_create.prog_fd = (uint32_t)prog;
    attr.link_create.target_ifindex = (uint32_t)ifindex;
    attr.link_create.attach_type = BPF_XDP;
    attr.link_create.flags = XDP_FLAGS_SKB_MODE;
    int link = (int)bpf_call(BPF_LINK_CREATE, &attr);
    if (link < 0) {
      fprintf(stderr, "ktprobe: BPF_LINK_CREATE (xdp, ifindex %lu): %s\n", ifindex, strerror(errno));
      return 1;
    }
    close(link);
  }
  close(prog);
  printf("{\"ifindex\":%lu,\"rounds\":%lu}\n", ifindex, rounds);
  return 0;
}
