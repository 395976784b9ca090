// SPDX-License-Identifier: GPL-2.0
// ktstale.ko: a test module that lets the host make TCG run a stale INT3,
// the guest hang that ktpt.so's StaleInt3Watch ends (pt-plugin/stale_int3.h).
//
// ktstale_target() is a function that never runs until `run` is written. The
// host (tests/vm/run-stale-int3.sh) writes an INT3 over its first byte
// straight into the guest's RAM file, behind QEMU's back, and writes 1 to
// `run`: the call traps, and this module's die notifier sends the CPU back to
// the INT3, as the kernel's own int3 path does for a breakpoint removed just
// after the hit. Once `hits` shows the CPU spinning there, the host puts the
// original byte back, again behind QEMU's back. Memory then holds the
// original byte while TCG's translation still holds the INT3: exactly the
// state a cross-modifying-code race leaves. The kernel now retries by
// itself (kprobe_int3_handler: the INT3 is gone from memory), and on its own
// TCG never translates the address again: the write of `run` never returns.
// With ktpt.so's flush it returns, and `done` counts the calls that did.
#include <linux/kdebug.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/notifier.h>
#include <linux/ptrace.h>
#include <linux/vmalloc.h>
#include <asm/io.h>

static unsigned long hits;  // INT3s at the target this module sent back
static unsigned long done;  // calls of the target that returned
static char where[64];      // "VIRT PHYS BYTE" of the target's first byte

module_param(hits, ulong, 0444);
module_param(done, ulong, 0444);
module_param_string(where, where, sizeof(where), 0444);

noinline int ktstale_target(int x)
{
	asm volatile("" : "+r"(x));
	return x * 3 + 1;
}

static int ktstale_die(struct notifier_block *nb, unsigned long val, void *data)
{
	struct die_args *args = data;
	unsigned long at = (unsigned long)ktstale_target;

	if (val != DIE_INT3 || !args->regs || args->regs->ip - 1 != at)
		return NOTIFY_DONE;
	hits++;
	args->regs->ip = at;  // run it again: the host is putting the byte back
	return NOTIFY_STOP;
}

static struct notifier_block ktstale_nb = { .notifier_call = ktstale_die };

static int ktstale_run(const char *val, const struct kernel_param *kp)
{
	if (ktstale_target(1) != 4)
		return -EIO;
	done++;
	return 0;
}

static const struct kernel_param_ops ktstale_run_ops = { .set = ktstale_run };
module_param_cb(run, &ktstale_run_ops, NULL, 0200);

static int __init ktstale_init(void)
{
	unsigned long at = (unsigned long)ktstale_target;
	struct page *page = vmalloc_to_page((void *)at);  // module text is in the vmalloc space

	if (!page)
		return -EFAULT;
	snprintf(where, sizeof(where), "%lx %llx %02x", at,
		 ((unsigned long long)page_to_pfn(page) << PAGE_SHIFT) + offset_in_page(at), *(u8 *)at);
	return register_die_notifier(&ktstale_nb);
}

static void __exit ktstale_exit(void)
{
	unregister_die_notifier(&ktstale_nb);
}

module_init(ktstale_init);
module_exit(ktstale_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("kthost test: a stale INT3 translation under TCG");
