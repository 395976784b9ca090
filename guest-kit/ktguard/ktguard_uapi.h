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

#include <linux/types.h> /* __u64, __u32: the kernel's, or linux-libc-dev's */

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

/* The shared block: one naturally aligned KTGUARD_SHARED_SIZE block of
 * guest-physical memory holding the ack words and a mirror of every waiting
 * notice. Every notice's ack_addr lies inside it, so a host that reads guest
 * RAM finds it by rounding any ack_addr down to KTGUARD_SHARED_SIZE. Such a
 * host may poll the mirror instead of waiting for the notice to come through
 * the reader, save the range and store the ack word: the hold then ends
 * without any guest-side work. The reader gets the notices still waiting
 * when it reads (a hold the host ended first is gone; counted as "unread"),
 * and the host acks each it gets. While the host is expected to store ack
 * words, a hold that may sleep queues its notice without waking a blocked
 * reader and polls its word first; it wakes the reader only if the poll
 * gives up. A host finds the block before any notice through the pointer
 * named KTGUARD_SHARED_SYMBOL.
 *
 *   [0, 64)                       struct ktguard_shared_header
 *   [ack_offset, +8 * slots)      the ack words, one u64 per slot
 *   [notice_offset, +48 * slots)  struct ktguard_notice per slot: id 0 while
 *                                 the slot is free
 *
 * A slot's mirror is written with its id first set to 0, then the fields,
 * then the id (with write barriers between): a reader that sees the same
 * non-zero id before and after reading the fields has a whole notice. ids
 * are never reused within a module load. `seq` grows by one at every change
 * of any slot (after the change is written), so an unchanged seq means
 * nothing to read. */
#define KTGUARD_SHARED_SIZE 16384
/* A pointer in ktguard's data (kallsyms, module ktguard) holding the block's
 * kernel virtual address, NULL while there is none: a host that reads guest
 * RAM finds the block through it before any notice names an ack word. */
#define KTGUARD_SHARED_SYMBOL "ktguard_shared_block"
#define KTGUARD_SHARED_MAGIC 0x315244484754544bULL /* "KTTGHDR1" */
#define KTGUARD_SHARED_VERSION 1

struct ktguard_shared_header {
	__u64 magic;
	__u32 version;
	__u32 slots;
	__u32 ack_offset;
	__u32 notice_offset;
	__u32 notice_size; /* KTGUARD_NOTICE_SIZE */
	__u32 reserved;
	__u64 seq;
	__u64 pad[3];
};

#ifdef __KERNEL__
static_assert(sizeof(struct ktguard_notice) == KTGUARD_NOTICE_SIZE);
static_assert(sizeof(struct ktguard_ack) == KTGUARD_ACK_SIZE);
static_assert(sizeof(struct ktguard_shared_header) == 64);
#elif defined(__cplusplus)
static_assert(sizeof(struct ktguard_notice) == KTGUARD_NOTICE_SIZE, "notice ABI");
static_assert(sizeof(struct ktguard_ack) == KTGUARD_ACK_SIZE, "ack ABI");
static_assert(sizeof(struct ktguard_shared_header) == 64, "shared header ABI");
#else
_Static_assert(sizeof(struct ktguard_notice) == KTGUARD_NOTICE_SIZE, "notice ABI");
_Static_assert(sizeof(struct ktguard_ack) == KTGUARD_ACK_SIZE, "ack ABI");
_Static_assert(sizeof(struct ktguard_shared_header) == 64, "shared header ABI");
#endif

#endif
