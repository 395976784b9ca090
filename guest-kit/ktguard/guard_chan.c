// SPDX-License-Identifier: GPL-2.0
/* The notice channel: /dev/ktguard and the holds.
 *
 * Each held free owns one slot of a fixed table, so nothing here allocates
 * and everything works from atomic context. A slot goes FREE -> QUEUED
 * (waiting for read) -> SENT (read, waiting for the ack) -> FREE; the holder
 * always frees its own slot, whatever ended the hold.
 */
#include <linux/atomic.h>
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/gfp.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/sched/clock.h>
#include <linux/sched/stat.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "ktguard.h"

#define KTG_SLOTS 256

enum ktg_slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_SENT };
enum ktg_outcome { OUT_WAITING, OUT_ACKED, OUT_HOST_ERROR, OUT_READER_GONE };

struct ktg_slot {
	enum ktg_slot_state state;
	int outcome; /* enum ktg_outcome; read without the lock by spinners */
	struct ktguard_notice notice;
	wait_queue_head_t wq; /* its holder sleeps here: an ack wakes only it */
	bool late_wake; /* its word poll gave up and woke the reader (for the verbose log) */
	unsigned int yields; /* times its word poll gave the CPU away (for the verbose log) */
};

static DEFINE_SPINLOCK(ktg_lock); /* guards slots, ktg_reader_open, ktg_next_id */
static struct ktg_slot ktg_slots[KTG_SLOTS];
static bool ktg_reader_open;
static bool ktg_stopping;
static u64 ktg_next_id = 1;
/* Slots in SLOT_QUEUED: the reader's poll and read look at this instead of
 * scanning every slot (ktguest polls on each of its rounds, while a trace
 * records it). Changed under ktg_lock, read without it. */
static int ktg_queued;
static DECLARE_WAIT_QUEUE_HEAD(ktg_reader_wq); /* reader: a notice is queued */
/* Wakes every holder (the reader went away, or ktguard is stopping). */
static void ktg_wake_all_holders(void);
static DECLARE_WAIT_QUEUE_HEAD(ktg_slot_wq);   /* sleeping frees waiting for a free slot */
static atomic_t ktg_slots_used = ATOMIC_INIT(0);

/* The shared block (ktguard_uapi.h): the ack words, one u64 per slot in the
 * linear map, so each has a guest-physical address to put in the notice, and
 * a mirror of each slot's notice. A host that reads guest RAM can also write
 * it: storing the notice's id in its word ends the hold without the round
 * trip back through QEMU, the guest's interrupt, ktguest and write(); and a
 * host that polls the mirror needs no trip through ktguest at all. The ack
 * still comes through the reader as well (it wakes a sleeping holder, and is
 * the only path for a host that cannot write). */
static void *ktg_shared;
static u64 *ktg_ack_words;
static struct ktguard_notice *ktg_mirror;
/* The block's address under a name a host finds in kallsyms
 * (KTGUARD_SHARED_SYMBOL): it can poll the mirror before the first notice
 * tells it where the block is. NULL while there is none. */
void *ktguard_shared_block;
/* Whether the host is expected to store ack words: only then do sleeping
 * holds poll their word before they sleep, and leave the reader asleep. Set
 * when the reader opens (a new host session: hosts that read guest RAM find
 * the block by its symbol, so the first hold can end on its word) and
 * whenever a hold sees its word stored; cleared when a poll gives up without
 * the word (a host that does not store words costs one poll a session). */
static bool ktg_words_live;

static u64 *ktg_slot_word(struct ktg_slot *slot)
{
	return ktg_ack_words ? &ktg_ack_words[slot - ktg_slots] : NULL;
}

/* Publishes a slot's notice (or its end, id 0) in the mirror. Under ktg_lock. */
static void ktg_mirror_set(struct ktg_slot *slot, bool waiting)
{
	struct ktguard_shared_header *h = ktg_shared;
	struct ktguard_notice *m;

	if (!ktg_mirror)
		return;
	m = &ktg_mirror[slot - ktg_slots];
	WRITE_ONCE(m->id, 0);
	if (waiting) {
		smp_wmb();
		m->start = slot->notice.start;
		m->end = slot->notice.end;
		m->kind = slot->notice.kind;
		m->cpu = slot->notice.cpu;
		m->time_ns = slot->notice.time_ns;
		m->ack_addr = slot->notice.ack_addr;
		smp_wmb();
		WRITE_ONCE(m->id, slot->notice.id);
	}
	smp_wmb();
	WRITE_ONCE(h->seq, h->seq + 1);
}

/* True when the host stored this hold's id in its ack word; the first to see
 * it (holder or reader ack) sets the outcome. */
static bool ktg_word_acked(struct ktg_slot *slot)
{
	u64 *word = ktg_slot_word(slot);

	if (!word || READ_ONCE(*word) != slot->notice.id)
		return false;
	if (cmpxchg(&slot->outcome, OUT_WAITING, OUT_ACKED) == OUT_WAITING)
		atomic64_inc(&ktg_stats.word_acks);
	if (!READ_ONCE(ktg_words_live))
		WRITE_ONCE(ktg_words_live, true);
	return true;
}

static void ktg_note_hold_time(u64 ns)
{
	s64 old = atomic64_read(&ktg_stats.hold_ns_max);

	atomic64_add(ns, &ktg_stats.hold_ns_total);
	atomic64_inc(&ktg_hold_hist[ktg_hist_bucket(ns / 1000)]);
	while ((s64)ns > old) {
		s64 seen = atomic64_cmpxchg(&ktg_stats.hold_ns_max, old, ns);

		if (seen == old)
			break;
		old = seen;
	}
}

/* Whether a hold that may sleep polls its ack word first (ktg_wait). */
static bool ktg_word_poll_first(enum ktg_hold_method method)
{
	return method == KTG_HOLD_SLEEP && READ_ONCE(ktg_word_spin_us) && READ_ONCE(ktg_words_live);
}

/* Takes a slot and queues the notice. Returns the slot, or NULL (with the
 * reason counted) when the free is not to be held. When every slot is busy,
 * a context that may sleep waits for one (within hold_ms, counted in its
 * hold); one that may not is an overflow. The reader is woken at once,
 * except for a hold that polls its ack word first: the host finds the notice
 * in the mirror and ends the hold without any guest-side work, and ktguest,
 * woken here, would run first on this CPU (its relay took 0.6-0.8 ms of a
 * ~1 ms median hold under TCG, and made the tail). ktg_wait wakes the reader
 * if the poll ends without the word. */
static struct ktg_slot *ktg_try_queue(unsigned long start, unsigned long end, u32 kind, bool wake,
				      bool *full);

static struct ktg_slot *ktg_queue(unsigned long start, unsigned long end, u32 kind,
				  enum ktg_hold_method method, bool poll_first)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(READ_ONCE(ktg_hold_ms));
	struct ktg_slot *slot;
	bool full;

	for (;;) {
		slot = ktg_try_queue(start, end, kind, !poll_first, &full);
		if (slot || !full)
			return slot;
		if (method != KTG_HOLD_SLEEP || time_after_eq(jiffies, deadline))
			break;
		atomic64_inc(&ktg_stats.slot_waits);
		wait_event_timeout(ktg_slot_wq,
				   atomic_read(&ktg_slots_used) < KTG_SLOTS || READ_ONCE(ktg_stopping),
				   max_t(long, 1, (long)(deadline - jiffies)));
	}
	atomic64_inc(&ktg_stats.overflows);
	ktg_record_miss(start, end, kind, "overflow");
	return NULL;
}

static struct ktg_slot *ktg_try_queue(unsigned long start, unsigned long end, u32 kind, bool wake,
				      bool *full)
{
	struct ktg_slot *slot = NULL;
	unsigned long flags;
	int i;

	*full = false;
	spin_lock_irqsave(&ktg_lock, flags);
	if (ktg_stopping || !ktg_reader_open) {
		spin_unlock_irqrestore(&ktg_lock, flags);
		atomic64_inc(&ktg_stats.unguarded);
		return NULL;
	}
	for (i = 0; i < KTG_SLOTS; i++) {
		if (ktg_slots[i].state == SLOT_FREE) {
			slot = &ktg_slots[i];
			break;
		}
	}
	*full = !slot;
	if (!slot) {
		spin_unlock_irqrestore(&ktg_lock, flags);
		return NULL;
	}
	atomic_inc(&ktg_slots_used);
	slot->state = SLOT_QUEUED;
	WRITE_ONCE(ktg_queued, ktg_queued + 1);
	WRITE_ONCE(slot->outcome, OUT_WAITING);
	slot->late_wake = false;
	slot->yields = 0;
	slot->notice.id = ktg_next_id++;
	slot->notice.start = start;
	slot->notice.end = end;
	slot->notice.kind = kind;
	slot->notice.cpu = raw_smp_processor_id();
	slot->notice.time_ns = local_clock();
	slot->notice.ack_addr = 0;
	if (ktg_slot_word(slot)) {
		WRITE_ONCE(*ktg_slot_word(slot), 0);
		slot->notice.ack_addr = virt_to_phys(ktg_slot_word(slot));
	}
	ktg_mirror_set(slot, true);
	spin_unlock_irqrestore(&ktg_lock, flags);
	atomic64_inc(&ktg_stats.notices);
	if (wake)
		wake_up_interruptible(&ktg_reader_wq);
	return slot;
}

static void ktg_release(struct ktg_slot *slot)
{
	unsigned long flags;

	spin_lock_irqsave(&ktg_lock, flags);
	if (slot->state == SLOT_QUEUED) {
		WRITE_ONCE(ktg_queued, ktg_queued - 1);
		atomic64_inc(&ktg_stats.unread);
	}
	slot->state = SLOT_FREE;
	ktg_mirror_set(slot, false);
	atomic_dec(&ktg_slots_used);
	spin_unlock_irqrestore(&ktg_lock, flags);
	wake_up(&ktg_slot_wq);
}

#define KTG_SPIN_BATCH 16

/* The cheap part of ktg_ended, for the inner spin: nothing is counted. */
static inline bool ktg_word_set(struct ktg_slot *slot)
{
	u64 *word = ktg_slot_word(slot);

	return READ_ONCE(slot->outcome) != OUT_WAITING || (word && READ_ONCE(*word) == slot->notice.id);
}

static bool ktg_ended(struct ktg_slot *slot)
{
	return READ_ONCE(slot->outcome) != OUT_WAITING || ktg_word_acked(slot);
}

/* Waits for an outcome: on the wait queue when sleeping is allowed, else by
 * polling the slot for at most min(hold_ms, spin_max_ms). Once the host is
 * known to store ack words, a hold that may sleep first polls its word for up
 * to word_spin_us (within hold_ms; past word_busy_us only while no other task
 * is runnable on its CPU), then wakes the reader, which it left asleep, and
 * sleeps until the reader's ack or its word. The poll is a
 * busy one: a timer sleep between checks costs more than the whole round
 * trip under TCG, where an idle vCPU is also slow to take the interrupts
 * the ack needs. */
static int ktg_wait(struct ktg_slot *slot, enum ktg_hold_method method, bool poll_first)
{
	unsigned int ms = READ_ONCE(ktg_hold_ms);

	if (method == KTG_HOLD_SLEEP) {
		unsigned long deadline = jiffies + msecs_to_jiffies(ms);
		unsigned int spin_us = READ_ONCE(ktg_word_spin_us);
		long left;

		if (poll_first) {
			u64 now = local_clock();
			u64 until = now + min_t(u64, (u64)spin_us * NSEC_PER_USEC, (u64)ms * NSEC_PER_MSEC);
			u64 busy_until = now + (u64)READ_ONCE(ktg_word_busy_us) * NSEC_PER_USEC;
			u64 yield_after = now + (u64)READ_ONCE(ktg_word_yield_us) * NSEC_PER_USEC;

			/* For word_yield_us the poll keeps its CPU even when the
			 * scheduler asks for it; then a task that preempts runs
			 * first (ktguest is not woken by this notice: see
			 * ktg_queue). Yielding early cost whole time slices: the
			 * guest charges the poll for the time its vCPU waited
			 * for a host CPU, so another task's turn could last tens
			 * of ms with the word long stored (agent bench, 3 busy
			 * guests on 2 cores: 99% of the slowest holds' time came
			 * after the word). Past word_busy_us the poll goes on
			 * only while nothing else is runnable here, on time the
			 * CPU would spend idle. */
			atomic64_inc(&ktg_stats.word_spins);
			while (!ktg_ended(slot) && (now = local_clock()) < until) {
				int i;

				if (need_resched() && now >= yield_after) {
					slot->yields++;
					atomic64_inc(&ktg_stats.word_yields);
					cond_resched();
					continue;
				}
				if (now >= busy_until && !single_task_running())
					break;
				/* The clock and the run queue are looked at
				 * once per KTG_SPIN_BATCH pauses: a trace
				 * records every instruction of this loop, and
				 * the word check alone is a few of them. */
				for (i = 0; i < KTG_SPIN_BATCH && !ktg_word_set(slot); ++i)
					cpu_relax();
			}
			/* The notice was queued without waking the reader: the
			 * channel takes over now. */
			if (!ktg_ended(slot)) {
				slot->late_wake = true;
				atomic64_inc(&ktg_stats.late_wakes);
				WRITE_ONCE(ktg_words_live, false);
				wake_up_interruptible(&ktg_reader_wq);
			}
		}
		/* Not interruptible: a fatal signal in the freeing task must not
		 * shorten the hold, and the timeout bounds it anyway. While the
		 * host stores words, the sleep wakes every word_sleep_us to look
		 * at the word: the reader's ack needs ktguest scheduled here and
		 * a round trip through the channel, which a busy guest on a busy
		 * host makes tens of ms; the word is usually stored long before. */
		while (!ktg_ended(slot)) {
			unsigned int step_us = READ_ONCE(ktg_word_sleep_us);

			left = (long)(deadline - jiffies);
			if (left <= 0)
				break;
			if (step_us && READ_ONCE(ktg_words_live) &&
			    (u64)step_us * NSEC_PER_USEC < (u64)jiffies_to_nsecs(left)) {
				atomic64_inc(&ktg_stats.word_sleeps);
				wait_event_hrtimeout(slot->wq, ktg_ended(slot),
						     ns_to_ktime((u64)step_us * NSEC_PER_USEC));
			} else {
				wait_event_timeout(slot->wq, ktg_ended(slot), left);
			}
		}
	} else {
		u64 deadline;

		ms = min(ms, READ_ONCE(ktg_spin_max_ms));
		deadline = local_clock() + (u64)ms * NSEC_PER_MSEC;
		atomic64_inc(&ktg_stats.spins);
		while (!ktg_ended(slot) && local_clock() < deadline) {
			int i;

			for (i = 0; i < KTG_SPIN_BATCH && !ktg_word_set(slot); ++i)
				cpu_relax();
		}
	}
	/* The reader's ack may have ended the hold first: still learn that the
	 * host stores words. */
	ktg_word_acked(slot);
	return READ_ONCE(slot->outcome);
}

/* Whether a hold that would sleep must spin instead. Interrupt context and
 * disabled interrupts are always visible. A held spinlock or a
 * preempt_disable() is visible only with CONFIG_PREEMPT_COUNT: without it
 * (PREEMPT_NONE kernels, as a small CI config has) preempt_count() does not
 * count them and preemptible() is always 0, which must not turn every hold
 * into a busy wait: on a single CPU that wait keeps ktguest, the relay it
 * waits for, from ever running, and every hold times out. The hooked paths
 * take mutexes or vfree, so they may sleep by construction. */
static bool ktg_atomic_context(void)
{
	if (in_interrupt() || irqs_disabled())
		return true;
	if (IS_ENABLED(CONFIG_PREEMPT_COUNT))
		return in_atomic() || rcu_preempt_depth() > 0;
	return false;
}

void ktg_guard(unsigned long start, unsigned long end, u32 kind, enum ktg_hold_method method)
{
	struct ktg_slot *slot;
	bool poll_first;
	u64 t0;
	int outcome;

	if (end <= start)
		return;
	if (method == KTG_HOLD_SLEEP && ktg_atomic_context())
		method = KTG_HOLD_SPIN;
	t0 = local_clock();
	/* Decided once: a notice queued without waking the reader must be
	 * followed by the word poll that wakes it when it gives up. */
	poll_first = ktg_word_poll_first(method);
	slot = ktg_queue(start, end, kind, method, poll_first);
	if (!slot)
		return;
	outcome = ktg_wait(slot, method, poll_first);
	ktg_note_hold_time(local_clock() - t0);
	switch (outcome) {
	case OUT_ACKED:
		atomic64_inc(&ktg_stats.acks);
		break;
	case OUT_HOST_ERROR:
		atomic64_inc(&ktg_stats.host_errors);
		ktg_record_miss(start, end, kind, "host-error");
		break;
	case OUT_READER_GONE:
		atomic64_inc(&ktg_stats.reader_gone);
		ktg_record_miss(start, end, kind, "reader-gone");
		break;
	default:
		atomic64_inc(&ktg_stats.timeouts);
		ktg_record_miss(start, end, kind, "timeout");
		pr_warn_ratelimited("ktguard: hold timed out: [%#lx, %#lx) kind %u\n",
				    start, end, kind);
		break;
	}
	if (READ_ONCE(ktg_verbose))
		pr_info("ktguard: notice %llu [%#lx, %#lx) kind %u %s: outcome %d after %llu us%s, %u yields\n",
			slot->notice.id, start, end, kind, method == KTG_HOLD_SLEEP ? "sleep" : "spin",
			outcome, (local_clock() - t0) / 1000,
			slot->late_wake ? " (word poll gave up)" : "", slot->yields);
	ktg_release(slot);
}

/* Ends every hold with OUT_READER_GONE. Called with ktg_lock held. */
static void ktg_abandon_all_locked(void)
{
	int i;

	for (i = 0; i < KTG_SLOTS; i++)
		if (ktg_slots[i].state != SLOT_FREE)
			WRITE_ONCE(ktg_slots[i].outcome, OUT_READER_GONE);
}

static int ktg_open(struct inode *inode, struct file *file)
{
	unsigned long flags;
	int ret = 0;

	spin_lock_irqsave(&ktg_lock, flags);
	if (ktg_reader_open) {
		ret = -EBUSY;
	} else {
		ktg_reader_open = true;
		/* A new session: expect its host to store ack words (see
		 * ktg_words_live); the first poll that gives up says otherwise. */
		WRITE_ONCE(ktg_words_live, ktg_shared != NULL);
	}
	spin_unlock_irqrestore(&ktg_lock, flags);
	return ret ? ret : stream_open(inode, file);
}

static int ktg_close(struct inode *inode, struct file *file)
{
	unsigned long flags;

	spin_lock_irqsave(&ktg_lock, flags);
	ktg_reader_open = false;
	ktg_abandon_all_locked();
	spin_unlock_irqrestore(&ktg_lock, flags);
	ktg_wake_all_holders();
	return 0;
}

/* Copies the oldest queued notice into *out and marks it SENT. */
static bool ktg_take_queued(struct ktguard_notice *out)
{
	struct ktg_slot *best = NULL;
	unsigned long flags;
	int i;

	if (!READ_ONCE(ktg_queued))
		return false;
	spin_lock_irqsave(&ktg_lock, flags);
	for (i = 0; i < KTG_SLOTS; i++) {
		struct ktg_slot *s = &ktg_slots[i];

		if (s->state == SLOT_QUEUED && (!best || s->notice.id < best->notice.id))
			best = s;
	}
	if (best) {
		best->state = SLOT_SENT;
		WRITE_ONCE(ktg_queued, ktg_queued - 1);
		*out = best->notice;
	}
	spin_unlock_irqrestore(&ktg_lock, flags);
	return best != NULL;
}

static bool ktg_any_queued(void)
{
	return READ_ONCE(ktg_queued) > 0;
}

static ssize_t ktg_read(struct file *file, char __user *buf, size_t len, loff_t *pos)
{
	struct ktguard_notice n;
	size_t done = 0;

	if (len < sizeof(n))
		return -EINVAL;
	while (done + sizeof(n) <= len) {
		if (!ktg_take_queued(&n)) {
			int ret;

			if (done)
				break;
			if (file->f_flags & O_NONBLOCK)
				return -EAGAIN;
			ret = wait_event_interruptible(ktg_reader_wq,
						       ktg_any_queued() || READ_ONCE(ktg_stopping));
			if (ret)
				return ret;
			if (READ_ONCE(ktg_stopping))
				return 0;
			continue;
		}
		if (copy_to_user(buf + done, &n, sizeof(n))) {
			/* The notice is lost to the reader; its holder will time out. */
			return done ? done : -EFAULT;
		}
		done += sizeof(n);
	}
	return done;
}

static void ktg_apply_ack(const struct ktguard_ack *ack)
{
	struct ktg_slot *found = NULL;
	unsigned long flags;
	bool issued;
	int i;

	spin_lock_irqsave(&ktg_lock, flags);
	issued = ack->id != 0 && ack->id < ktg_next_id;
	for (i = 0; i < KTG_SLOTS; i++) {
		struct ktg_slot *s = &ktg_slots[i];

		if (s->state != SLOT_FREE && s->notice.id == ack->id &&
		    cmpxchg(&s->outcome, OUT_WAITING, ack->status ? OUT_HOST_ERROR : OUT_ACKED) == OUT_WAITING) {
			found = s;
			break;
		}
	}
	spin_unlock_irqrestore(&ktg_lock, flags);
	/* The slot array is static, so its wait queue outlives any reuse; a
	 * reused slot's new holder just re-checks its outcome. */
	if (found)
		wake_up(&found->wq);
	else if (issued)
		atomic64_inc(&ktg_stats.late_acks);
	else
		atomic64_inc(&ktg_stats.stale_acks);
}

static ssize_t ktg_write(struct file *file, const char __user *buf, size_t len, loff_t *pos)
{
	struct ktguard_ack ack;
	size_t done;

	if (len == 0 || len % sizeof(ack))
		return -EINVAL;
	for (done = 0; done < len; done += sizeof(ack)) {
		if (copy_from_user(&ack, buf + done, sizeof(ack)))
			return done ? done : -EFAULT;
		ktg_apply_ack(&ack);
	}
	return done;
}

static __poll_t ktg_poll(struct file *file, poll_table *wait)
{
	poll_wait(file, &ktg_reader_wq, wait);
	return ktg_any_queued() ? EPOLLIN | EPOLLRDNORM : 0;
}

static const struct file_operations ktg_fops = {
	.owner = THIS_MODULE,
	.open = ktg_open,
	.release = ktg_close,
	.read = ktg_read,
	.write = ktg_write,
	.poll = ktg_poll,
	.llseek = no_llseek,
};

static struct miscdevice ktg_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "ktguard",
	.fops = &ktg_fops,
	.mode = 0600,
};

static void ktg_wake_all_holders(void)
{
	int i;

	for (i = 0; i < KTG_SLOTS; i++)
		wake_up_all(&ktg_slots[i].wq);
}

static void ktg_free_shared(void)
{
	WRITE_ONCE(ktguard_shared_block, NULL);
	if (ktg_shared)
		free_pages((unsigned long)ktg_shared, get_order(KTGUARD_SHARED_SIZE));
	ktg_shared = NULL;
	ktg_ack_words = NULL;
	ktg_mirror = NULL;
}

int ktg_chan_init(void)
{
	int i, ret;

	for (i = 0; i < KTG_SLOTS; i++)
		init_waitqueue_head(&ktg_slots[i].wq);
	BUILD_BUG_ON(sizeof(struct ktguard_shared_header) + KTG_SLOTS * (sizeof(u64) + KTGUARD_NOTICE_SIZE) >
		     KTGUARD_SHARED_SIZE);
	/* Naturally aligned (the buddy allocator aligns a block to its size),
	 * physically contiguous, in the linear map. Without it, holds just
	 * wait for the reader's ack. */
	ktg_shared = (void *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, get_order(KTGUARD_SHARED_SIZE));
	if (ktg_shared) {
		struct ktguard_shared_header *h = ktg_shared;

		h->version = KTGUARD_SHARED_VERSION;
		h->slots = KTG_SLOTS;
		h->ack_offset = sizeof(*h);
		h->notice_offset = sizeof(*h) + KTG_SLOTS * sizeof(u64);
		h->notice_size = KTGUARD_NOTICE_SIZE;
		ktg_ack_words = (u64 *)((char *)ktg_shared + h->ack_offset);
		ktg_mirror = (struct ktguard_notice *)((char *)ktg_shared + h->notice_offset);
		smp_wmb();
		WRITE_ONCE(h->magic, KTGUARD_SHARED_MAGIC);
		WRITE_ONCE(ktguard_shared_block, ktg_shared);
	}
	ret = misc_register(&ktg_misc);
	if (ret)
		ktg_free_shared();
	return ret;
}

void ktg_chan_stop(void)
{
	unsigned long flags;

	spin_lock_irqsave(&ktg_lock, flags);
	ktg_stopping = true;
	ktg_abandon_all_locked();
	spin_unlock_irqrestore(&ktg_lock, flags);
	ktg_wake_all_holders();
	wake_up_all(&ktg_slot_wq);
	wake_up_interruptible_all(&ktg_reader_wq);
}

void ktg_chan_exit(void)
{
	misc_deregister(&ktg_misc);
	/* The hooks are gone and every holder has returned. */
	ktg_free_shared();
}
