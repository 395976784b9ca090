// SPDX-License-Identifier: GPL-2.0
/*
 * ktregress: a test module with a known amount of work, for kthost's
 * regression tests. Writing to /sys/module/ktregress/parameters/run calls
 * ktregress_work(), which runs its loop KTREGRESS_LOOPS times. Two builds
 * that differ only in KTREGRESS_LOOPS are two "kernels" whose difference is
 * known exactly: one function, by the ratio of the loop counts.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>

#ifndef KTREGRESS_LOOPS
#define KTREGRESS_LOOPS 200
#endif

static unsigned long ktregress_sink;

/* One step of a linear congruential generator. The empty asm makes x opaque
 * to the compiler after each step, so that it cannot fold several steps into
 * one. */
#define KTREGRESS_STEP(x)                                                      \
	do {                                                                   \
		(x) = (x) * 6364136223846793005UL + 1442695040888963407UL;     \
		asm volatile("" : "+r"(x));                                    \
	} while (0)

/*
 * Each iteration runs 16 steps: many instructions per branch. Under QEMU TCG
 * with the software PT plugin a guest's time goes mostly per block, not per
 * instruction, so the new build's extra instructions add little to how long
 * a run lasts, and little to the kernel's time-driven work (the tick, load
 * balancing) that a longer run would bring.
 */
static noinline unsigned long ktregress_work(unsigned long seed)
{
	unsigned long x = seed;
	unsigned int i;

	for (i = 0; i < KTREGRESS_LOOPS; i++) {
		KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x);
		KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x);
		KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x);
		KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x); KTREGRESS_STEP(x);
	}
	return x;
}

static int ktregress_run(const char *val, const struct kernel_param *kp)
{
	unsigned long seed;
	int err = kstrtoul(val, 0, &seed);

	if (err)
		return err;
	WRITE_ONCE(ktregress_sink, ktregress_work(seed));
	return 0;
}

static const struct kernel_param_ops ktregress_run_ops = {
	.set = ktregress_run,
	.get = NULL,
};
module_param_cb(run, &ktregress_run_ops, NULL, 0200);
MODULE_PARM_DESC(run, "write a number: runs ktregress_work once with it as the seed");

static unsigned int loops = KTREGRESS_LOOPS;
module_param(loops, uint, 0444);
MODULE_PARM_DESC(loops, "the loop count this build was made with");

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("kthost test: a function with a known amount of work");
