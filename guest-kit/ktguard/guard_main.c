// SPDX-License-Identifier: GPL-2.0
/* ktguard: holds every free of executable kernel text until the host
 * (kthost, through ktguest and /dev/ktguard) has saved the bytes, or a
 * timeout passes. See README.md for the hooks, the ABI and the semantics. */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/sched/clock.h>
#include <linux/spinlock.h>

#include "ktguard.h"

unsigned int ktg_hold_ms = 200;
unsigned int ktg_spin_max_ms = 200;
unsigned int ktg_word_spin_us = 3000;
unsigned int ktg_word_busy_us = 3000;
unsigned int ktg_word_sleep_us = 500;
unsigned int ktg_word_yield_us = 1000;
struct ktg_stats ktg_stats;

static int ktg_set_ms(const char *val, const struct kernel_param *kp)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v > 10000) /* a hold longer than 10 s looks like a hang */
		return -ERANGE;
	WRITE_ONCE(*(unsigned int *)kp->arg, v);
	return 0;
}

static const struct kernel_param_ops ktg_ms_ops = {
	.set = ktg_set_ms,
	.get = param_get_uint,
};
module_param_cb(hold_ms, &ktg_ms_ops, &ktg_hold_ms, 0644);
MODULE_PARM_DESC(hold_ms, "longest hold of a freeing context, in ms (0..10000, default 200)");
module_param_cb(spin_max_ms, &ktg_ms_ops, &ktg_spin_max_ms, 0644);
MODULE_PARM_DESC(spin_max_ms, "cap on a hold in atomic context (busy wait), in ms (default 200)");
module_param_named(word_spin_us, ktg_word_spin_us, uint, 0644);
MODULE_PARM_DESC(word_spin_us, "once the host stores ack words in guest RAM, how long a hold that may sleep "
		 "first polls its word (busy, yielding when asked), in us; then it sleeps until the reader's ack "
		 "(default 3000; 0: sleep at once)");
module_param_named(word_busy_us, ktg_word_busy_us, uint, 0644);
MODULE_PARM_DESC(word_busy_us, "of word_spin_us, how long the poll goes on while other tasks wait for the CPU; "
		 "after that only while the CPU would otherwise idle, in us (default 3000: all of it)");
module_param_named(word_yield_us, ktg_word_yield_us, uint, 0644);
MODULE_PARM_DESC(word_yield_us, "of word_spin_us, how long the poll keeps its CPU when the scheduler asks for it, "
		 "in us; after that it yields whenever asked (default 1000; 0: yield at once)");
module_param_named(word_sleep_us, ktg_word_sleep_us, uint, 0644);
MODULE_PARM_DESC(word_sleep_us, "once the host stores ack words, how often a hold that sleeps (after word_spin_us) "
		 "wakes to look at its word, in us (default 500; 0: only the reader's ack wakes it)");
bool ktg_verbose;
module_param_named(verbose, ktg_verbose, bool, 0644);
MODULE_PARM_DESC(verbose, "log every notice and its outcome (for tests)");

/* ---- misses: the last KTG_MISSES ranges that were not saved ---- */

#define KTG_MISSES 16

struct ktg_miss {
	unsigned long start, end;
	u64 time_ns;
	u32 kind;
	const char *why;
};

static DEFINE_SPINLOCK(ktg_miss_lock);
static struct ktg_miss ktg_misses[KTG_MISSES];
static u64 ktg_miss_count;

void ktg_record_miss(unsigned long start, unsigned long end, u32 kind, const char *why)
{
	unsigned long flags;
	struct ktg_miss *m;

	spin_lock_irqsave(&ktg_miss_lock, flags);
	m = &ktg_misses[ktg_miss_count % KTG_MISSES];
	m->start = start;
	m->end = end;
	m->kind = kind;
	m->why = why;
	m->time_ns = local_clock();
	ktg_miss_count++;
	spin_unlock_irqrestore(&ktg_miss_lock, flags);
}

/* "misses": one line per recorded miss, oldest first:
 *   <seq> <why> kind=<k> start=<hex> end=<hex> time_ns=<t> */
static int ktg_get_misses(char *buf, const struct kernel_param *kp)
{
	unsigned long flags;
	u64 first, i;
	int len = 0;

	spin_lock_irqsave(&ktg_miss_lock, flags);
	first = ktg_miss_count > KTG_MISSES ? ktg_miss_count - KTG_MISSES : 0;
	for (i = first; i < ktg_miss_count; i++) {
		struct ktg_miss *m = &ktg_misses[i % KTG_MISSES];

		len += scnprintf(buf + len, PAGE_SIZE - len,
				 "%llu %s kind=%u start=%#lx end=%#lx time_ns=%llu\n",
				 i, m->why, m->kind, m->start, m->end, m->time_ns);
	}
	spin_unlock_irqrestore(&ktg_miss_lock, flags);
	return len;
}

static const struct kernel_param_ops ktg_misses_ops = { .get = ktg_get_misses };
module_param_cb(misses, &ktg_misses_ops, NULL, 0444);
MODULE_PARM_DESC(misses, "the last 16 ranges that were not saved (read-only)");

/* "stats": name=value lines, one per counter. */
static int ktg_get_stats(char *buf, const struct kernel_param *kp)
{
	struct ktg_stats *s = &ktg_stats;

	return scnprintf(buf, PAGE_SIZE,
			 "notices=%lld\nacks=%lld\nhost_errors=%lld\ntimeouts=%lld\n"
			 "reader_gone=%lld\nunguarded=%lld\noverflows=%lld\nstale_acks=%lld\nlate_acks=%lld\n"
			 "word_acks=%lld\nunread=%lld\nword_spins=%lld\nword_sleeps=%lld\nlate_wakes=%lld\nword_yields=%lld\n"
			 "spins=%lld\nslot_waits=%lld\nhold_ns_total=%lld\nhold_ns_max=%lld\nmisses=%llu\n",
			 atomic64_read(&s->notices), atomic64_read(&s->acks),
			 atomic64_read(&s->host_errors), atomic64_read(&s->timeouts),
			 atomic64_read(&s->reader_gone), atomic64_read(&s->unguarded),
			 atomic64_read(&s->overflows), atomic64_read(&s->stale_acks),
			 atomic64_read(&s->late_acks), atomic64_read(&s->word_acks), atomic64_read(&s->unread),
			 atomic64_read(&s->word_spins), atomic64_read(&s->word_sleeps), atomic64_read(&s->late_wakes),
			 atomic64_read(&s->word_yields),
			 atomic64_read(&s->spins), atomic64_read(&s->slot_waits), atomic64_read(&s->hold_ns_total),
			 atomic64_read(&s->hold_ns_max), READ_ONCE(ktg_miss_count));
}

static const struct kernel_param_ops ktg_stats_ops = { .get = ktg_get_stats };
module_param_cb(stats, &ktg_stats_ops, NULL, 0444);
MODULE_PARM_DESC(stats, "counters (read-only)");

/* "hold_hist": one line per non-empty bucket, "<lowest us> <count>", in
 * ascending order; the bucket holds durations from its lowest value up to the
 * next line's (the last bucket also holds everything longer). Writing
 * anything resets it. */
atomic64_t ktg_hold_hist[KTG_HIST_BUCKETS];

static u64 ktg_hist_low(unsigned int idx)
{
	unsigned int e, sub;

	if (idx < 16)
		return idx;
	e = (idx - 16) / 16 + 4;
	sub = (idx - 16) % 16;
	return (u64)(16 + sub) << (e - 4);
}

static int ktg_get_hist(char *buf, const struct kernel_param *kp)
{
	int len = 0;
	unsigned int i;

	for (i = 0; i < KTG_HIST_BUCKETS; i++) {
		s64 n = atomic64_read(&ktg_hold_hist[i]);

		if (n)
			len += scnprintf(buf + len, PAGE_SIZE - len, "%llu %lld\n", ktg_hist_low(i), n);
	}
	return len;
}

static int ktg_reset_hist(const char *val, const struct kernel_param *kp)
{
	unsigned int i;

	for (i = 0; i < KTG_HIST_BUCKETS; i++)
		atomic64_set(&ktg_hold_hist[i], 0);
	return 0;
}

static const struct kernel_param_ops ktg_hist_ops = { .get = ktg_get_hist, .set = ktg_reset_hist };
module_param_cb(hold_hist, &ktg_hist_ops, NULL, 0644);
MODULE_PARM_DESC(hold_hist, "hold durations: \"<lowest us> <count>\" per non-empty bucket; write to reset");

static int __init ktg_init(void)
{
	int ret = ktg_chan_init();

	if (ret) {
		pr_err("ktguard: cannot register /dev/ktguard: %d\n", ret);
		return ret;
	}
	ret = ktg_hooks_init();
	if (ret) {
		ktg_chan_stop();
		ktg_chan_exit();
		return ret;
	}
	pr_info("ktguard: loaded, hold_ms=%u spin_max_ms=%u word_spin_us=%u word_busy_us=%u\n", ktg_hold_ms,
		ktg_spin_max_ms, ktg_word_spin_us, ktg_word_busy_us);
	return 0;
}

static void __exit ktg_exit(void)
{
	/* Release holders first so that unhooking never waits on a hold. */
	ktg_chan_stop();
	ktg_hooks_exit();
	ktg_chan_exit();
}

module_init(ktg_init);
module_exit(ktg_exit);
MODULE_LICENSE("GPL"); /* kprobes, ftrace and sprint_symbol are GPL-only */
MODULE_DESCRIPTION("kthost: hold frees of executable kernel text until the host saved them");
