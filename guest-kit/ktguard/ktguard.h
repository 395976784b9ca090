/* SPDX-License-Identifier: GPL-2.0 */
/* Internal interfaces of the ktguard module. */
#ifndef KTGUARD_H
#define KTGUARD_H

#include <linux/types.h>
#include "ktguard_uapi.h"

/* How a hook may hold the freeing context. */
enum ktg_hold_method {
	KTG_HOLD_SLEEP, /* process context, no spinlock held: wait on a wait queue */
	KTG_HOLD_SPIN,  /* atomic context (kprobe handler): bounded busy wait */
};

/* Sends the notice for [start, end) and holds the caller until the host
 * acks it, the hold times out, or the reader goes away. Never fails: every
 * outcome other than an ack is counted (and a miss's address recorded).
 * A SLEEP request is downgraded to SPIN when the caller turns out to be
 * atomic. Does nothing for an empty range or while ktguard is stopping. */
void ktg_guard(unsigned long start, unsigned long end, u32 kind, enum ktg_hold_method method);

/* The misc device: register/deregister. ktg_chan_stop releases every holder
 * and makes later ktg_guard calls return at once. */
int ktg_chan_init(void);
void ktg_chan_stop(void);
void ktg_chan_exit(void);

/* Hooks on the kernel's text-freeing paths. */
int ktg_hooks_init(void);
void ktg_hooks_exit(void);

/* Parameters (guard_main.c). */
extern unsigned int ktg_hold_ms;
extern unsigned int ktg_spin_max_ms;
extern unsigned int ktg_word_spin_us;
extern unsigned int ktg_word_busy_us;
extern unsigned int ktg_word_sleep_us;
extern unsigned int ktg_word_yield_us;
extern bool ktg_verbose;

/* Counters (guard_main.c). */
struct ktg_stats {
	atomic64_t notices;    /* notices queued for the reader */
	atomic64_t acks;       /* holds ended by an ack with status 0 */
	atomic64_t host_errors;/* holds ended by an ack with status != 0 */
	atomic64_t timeouts;   /* holds ended by the timeout */
	atomic64_t reader_gone;/* holds ended because the reader closed */
	atomic64_t unguarded;  /* frees seen while no reader was open */
	atomic64_t overflows;  /* frees not held: every pending slot was busy */
	atomic64_t stale_acks; /* acks for ids never issued */
	atomic64_t late_acks;  /* acks for holds that had already ended */
	atomic64_t word_acks;  /* holds ended by the host storing the id in the ack word */
	atomic64_t unread;     /* holds that ended before the reader read their notice (the host polled the mirror) */
	atomic64_t word_spins; /* sleeping holds that first polled their ack word (ack words seen this session) */
	atomic64_t word_sleeps; /* timed sleeps of holds between looks at their ack word (word_sleep_us) */
	atomic64_t late_wakes; /* word polls that ended without the word and woke the reader only then */
	atomic64_t word_yields; /* times a word poll gave its CPU to another task (past word_yield_us) */
	atomic64_t spins;      /* holds done by busy waiting */
	atomic64_t slot_waits; /* sleeping frees that waited for a free slot */
	atomic64_t hold_ns_total; /* time spent holding, all holds */
	atomic64_t hold_ns_max;
};
extern struct ktg_stats ktg_stats;

/* Hold durations: a log-linear histogram of microseconds (16 buckets per
 * power of two, about 6% wide), read and reset through "hold_hist". */
#define KTG_HIST_BUCKETS 352
extern atomic64_t ktg_hold_hist[KTG_HIST_BUCKETS];
static inline unsigned int ktg_hist_bucket(u64 us)
{
	unsigned int e, idx;

	if (us < 16)
		return (unsigned int)us;
	e = 63 - __builtin_clzll(us); /* >= 4 */
	idx = 16 + (e - 4) * 16 + (unsigned int)((us >> (e - 4)) & 15);
	return idx < KTG_HIST_BUCKETS ? idx : KTG_HIST_BUCKETS - 1;
}

/* Remembers a miss (timeout, host error, reader gone, overflow) with its
 * range, for the "misses" parameter. Safe in any context. */
void ktg_record_miss(unsigned long start, unsigned long end, u32 kind, const char *why);

#endif
