/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* The /dev/ktguard ABI, shared by the kernel module and its readers
 * (ktguest, ktprobe guard-reader). Fixed-size little-endian records; the
 * layout has no implicit padding, so the same header works in the kernel and
 * in user space.
 *
 * read():  whole struct ktguard_notice records; a buffer smaller than one
 *          record gets -EINVAL. Blocks unless O_NONBLOCK (then -EAGAIN).
 * write(): whole struct ktguard_ack records (a multiple of 16 bytes, else
 *          -EINVAL). An ack for an id whose hold already ended (by the ack
 *          word, a timeout or the reader leaving) is counted as late, one
 *          for an id never issued as stale; both are ignored.
 * poll():  EPOLLIN when at least one notice is waiting to be read.
 * open():  one reader at a time (a second open gets -EBUSY). While no reader
 *          has the device open, frees are not held at all ("unguarded").
 */
#ifndef KTGUARD_UAPI_H
#define KTGUARD_UAPI_H

#include "kthost_shared.h" /* guest-kit/include; build.sh copies it beside this file */

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
typedef uint64_t __u64;
typedef uint32_t __u32;
#endif

#define KTGUARD_DEVICE "/dev/ktguard"
#define KTGUARD_ABI_VERSION 2

/* "Text [start, end) is about to go": the freeing context is held until the
 * ack with the same id arrives, or the hold times out. */
struct ktguard_notice {
	__u64 id;      /* 1, 2, 3, ... per module load; never 0 */
	__u64 start;   /* first byte (guest kernel virtual address) */
	__u64 end;     /* one past the last byte */
	__u32 kind;    /* enum ktguard_kind */
	__u32 cpu;     /* CPU the freeing context runs on */
	__u64 time_ns; /* local_clock() at the notice: perf's default clock */
	/* Guest-physical address of an aligned u64 that is 0 while the hold
	 * waits. A host with access to guest RAM may store `id` there once the
	 * bytes are saved: the holder sees it without waiting for the ack to
	 * come back through the reader (which must still send the ack). 0: no
	 * such word. */
	__u64 ack_addr;
};

/* The host's answer. status 0: the bytes were saved. Anything else: the host
 * could not save them (counted as a host error, the hold still ends). */
struct ktguard_ack {
	__u64 id;
	__u32 status;
	__u32 reserved; /* write 0 */
};

/* What is being freed: the guard's share of kthost_shared.h's text kinds,
 * which GUARD_NOTICE carries to the host unchanged. */
enum ktguard_kind {
	KTGUARD_KIND_BPF_PROG_PACK = KTHOST_TEXT_BPF_PROG_PACK,
	KTGUARD_KIND_BPF_DISPATCHER = KTHOST_TEXT_BPF_DISPATCHER,
	KTGUARD_KIND_BPF_EXEC = KTHOST_TEXT_BPF_EXEC,
	KTGUARD_KIND_BPF_TRAMPOLINE = KTHOST_TEXT_BPF_TRAMPOLINE,
	KTGUARD_KIND_MODULE_CORE = KTHOST_TEXT_MODULE_CORE,
	KTGUARD_KIND_MODULE_INIT = KTHOST_TEXT_MODULE_INIT,
	KTGUARD_KIND_FTRACE_TRAMPOLINE = KTHOST_TEXT_FTRACE_TRAMPOLINE,
	KTGUARD_KIND_KPROBE_INSN = KTHOST_TEXT_KPROBE_INSN,
	KTGUARD_KIND_MODULE_MEMFREE = KTHOST_TEXT_MODULE_MEMFREE,
};

#define KTGUARD_NOTICE_SIZE 48
#define KTGUARD_ACK_SIZE 16

#ifdef __KERNEL__
static_assert(sizeof(struct ktguard_notice) == KTGUARD_NOTICE_SIZE);
static_assert(sizeof(struct ktguard_ack) == KTGUARD_ACK_SIZE);
#else
_Static_assert(sizeof(struct ktguard_notice) == KTGUARD_NOTICE_SIZE, "notice ABI");
_Static_assert(sizeof(struct ktguard_ack) == KTGUARD_ACK_SIZE, "ack ABI");
#endif

#endif
