// SPDX-License-Identifier: GPL-2.0
/* Hooks on the kernel 6.1 paths that free or rewrite executable text.
 *
 * Every path hooked here runs in process context and may sleep (each one
 * takes a mutex or calls vfree). A kprobe handler can never sleep, so a
 * kprobe alone would turn every hold into a busy wait with preemption off.
 * Instead each hooked function is redirected with ftrace (IPMODIFY, the way
 * livepatch does it) to a wrapper here with the same signature: the wrapper
 * runs in the caller's own context, sleeps while it holds, then calls the
 * original function. The redirection skips calls coming from this module, so
 * the wrapper's call of the original runs it unchanged.
 *
 * When a function cannot be traced by ftrace (notrace, or another IPMODIFY
 * user such as livepatch owns it), the hook falls back to a kprobe whose
 * pre-handler reads the same arguments from pt_regs and holds by a bounded
 * busy wait (spin_max_ms). The "hooks" parameter shows what each hook got.
 */
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/ftrace.h>
#include <linux/kallsyms.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/mm.h>
#include <linux/notifier.h>
#include <linux/ptrace.h>
#include <linux/vmalloc.h>
#include <linux/delay.h>

#include "ktguard.h"

enum ktg_hook_how { HOW_NONE, HOW_FTRACE, HOW_KPROBE };

struct ktg_hook {
	const char *symbol;
	/* Computes the range from the hooked function's first three arguments
	 * and its caller, and guards it with the given method. */
	void (*notice)(unsigned long a0, unsigned long a1, unsigned long a2,
		       unsigned long caller, enum ktg_hold_method method);
	void *wrapper;       /* ftrace redirection target */
	unsigned long addr;  /* the hooked function; the wrapper calls it */
	enum ktg_hook_how how;
	struct kprobe kp;
};

static atomic_t ktg_inflight = ATOMIC_INIT(0); /* tasks inside a wrapper */

/* ---- bpf_prog_pack_free(struct bpf_binary_header *hdr) ----
 * kernel/bpf/core.c. Frees a JIT image: a chunk of a shared 2 MiB pack is
 * overwritten with int3 (bpf_arch_text_invalidate) and only the pack is
 * freed when empty; an image larger than a pack is module_memfree'd. Called
 * from bpf_jit_binary_pack_free (bpf_jit_free via bpf_prog_free_deferred, a
 * work item; and the JIT's error paths). Takes pack_mutex: may sleep. */
static void ktg_prog_pack_notice(unsigned long hdr, unsigned long a1, unsigned long a2,
				 unsigned long caller, enum ktg_hold_method method)
{
	u32 size;

	if (!hdr || copy_from_kernel_nofault(&size, (void *)hdr, sizeof(size)))
		return;
	ktg_guard(hdr, hdr + size, KTGUARD_KIND_BPF_PROG_PACK, method);
}

/* ---- bpf_dispatcher_change_prog(struct bpf_dispatcher *d, from, to) ----
 * kernel/bpf/dispatcher.c. A dispatcher image is one page in two halves;
 * bpf_dispatcher_update writes the new dispatcher into the half not in use
 * (image_off ^ PAGE_SIZE/2, or half 0 when it had no programs) with
 * bpf_arch_text_copy. That rewrite invalidates text that ran before, so the
 * half is noticed before the update. Takes d->mutex: may sleep. The fields
 * are read before d->mutex is taken, so the notice may name the half that a
 * concurrent update is about to use; both halves' old bytes are still
 * correct when copied. */
static void ktg_dispatcher_notice(unsigned long dp, unsigned long from, unsigned long to,
				  unsigned long caller, enum ktg_hold_method method)
{
	struct bpf_dispatcher *d = (struct bpf_dispatcher *)dp;
	unsigned long image, half;
	int progs;

	if (!d || from == to)
		return;
	image = (unsigned long)READ_ONCE(d->image);
	if (!image)
		return; /* allocated on first use: nothing ran yet */
	progs = READ_ONCE(d->num_progs);
	/* With no program left the update writes nothing (the dispatcher
	 * becomes the nop function). */
	if (progs + (to ? 1 : 0) - (from ? 1 : 0) <= 0)
		return;
	half = progs ? (READ_ONCE(d->image_off) ^ (PAGE_SIZE / 2)) : 0;
	ktg_guard(image + half, image + half + PAGE_SIZE / 2, KTGUARD_KIND_BPF_DISPATCHER, method);
}

/* ---- module_memfree(void *module_region) ----
 * kernel/module/main.c (weak; x86 keeps the generic vfree one). Every
 * executable allocation made by module_alloc ends here: module core and init
 * (handled by the notifier below, skipped here), BPF packs (handled above,
 * skipped), bpf_jit_free_exec (BPF trampolines, struct_ops images, unpacked
 * JIT images), ftrace trampolines (arch_ftrace_trampoline_free), kprobe
 * instruction pages (free_insn_page). The caller names the kind. The size is
 * not passed, so it is measured: mapped pages from the start up to the
 * vmalloc guard page. WARN_ON(in_interrupt()) and vfree: may sleep. */
#define KTG_MEMFREE_MAX_PAGES 4096 /* 16 MiB: larger regions are cut and noted */

static u32 ktg_memfree_kind(unsigned long caller)
{
	char name[KSYM_SYMBOL_LEN];

	sprint_symbol_no_offset(name, caller);
	if (READ_ONCE(ktg_verbose))
		pr_info("ktguard: module_memfree from %s\n", name);
	/* Covered by a hook that knows the exact range: free_module (inlined
	 * into delete_module in the Debian build), do_free_init, a failed
	 * load_module (core and init were held at GOING, or never ran), and
	 * bpf_prog_pack_free. */
	if (strstr(name, "free_module") || strstr(name, "delete_module") ||
	    strstr(name, "load_module") || strstr(name, "do_free_init") ||
	    strstr(name, "bpf_prog_pack_free"))
		return 0;
	if (strstr(name, "tramp_image"))
		return KTGUARD_KIND_BPF_TRAMPOLINE;
	if (strstr(name, "bpf"))
		return KTGUARD_KIND_BPF_EXEC;
	if (strstr(name, "ftrace"))
		return KTGUARD_KIND_FTRACE_TRAMPOLINE;
	if (strstr(name, "insn") || strstr(name, "slot") || strstr(name, "kprobe"))
		return KTGUARD_KIND_KPROBE_INSN;
	return KTGUARD_KIND_MODULE_MEMFREE;
}

static void ktg_memfree_notice(unsigned long region, unsigned long a1, unsigned long a2,
			       unsigned long caller, enum ktg_hold_method method)
{
	unsigned long start = region & PAGE_MASK, end = start;
	u32 kind;

	if (!region || !(is_vmalloc_addr((void *)region) ||
			 (region >= MODULES_VADDR && region < MODULES_END)))
		return;
	kind = ktg_memfree_kind(caller);
	if (!kind)
		return;
	while (end - start < KTG_MEMFREE_MAX_PAGES * PAGE_SIZE && vmalloc_to_page((void *)end))
		end += PAGE_SIZE;
	if (end - start >= KTG_MEMFREE_MAX_PAGES * PAGE_SIZE)
		ktg_record_miss(end, end, kind, "memfree-cut");
	ktg_guard(start, end, kind, method);
}

/* ---- __free_insn_slot(struct kprobe_insn_cache *c, kprobe_opcode_t *slot, bool dirty) ----
 * kernel/kprobes.c. A kprobe's (or optprobe's) out-of-line instruction slot
 * is given back: unregister_kprobe -> arch_remove_kprobe -> free_insn_slot,
 * or free_optinsn_slot. The slot's bytes stay until the slot is reused by
 * the next kprobe (text_poke) or its page is freed (free_insn_page ->
 * module_memfree, held above). Range [slot, slot + c->insn_size) (x86
 * kprobe_opcode_t is a byte). Takes c->mutex; callers hold kprobe_mutex:
 * may sleep. */
static void ktg_insn_slot_notice(unsigned long cache, unsigned long slot, unsigned long dirty,
				 unsigned long caller, enum ktg_hold_method method)
{
	struct kprobe_insn_cache *c = (struct kprobe_insn_cache *)cache;
	size_t size;

	if (!c || !slot || copy_from_kernel_nofault(&size, &c->insn_size, sizeof(size)))
		return;
	ktg_guard(slot, slot + size * sizeof(kprobe_opcode_t), KTGUARD_KIND_KPROBE_INSN, method);
}

/* ---- the wrappers: same signature as the hooked function ----
 * Each is named ktg_wrap_<the end of the hooked function's name>: kthost's
 * observer share (host/decode/src/observer.cpp) reads the name to leave the
 * original's own work, which runs the same without ktguard, to the kernel. */

enum { HOOK_PROG_PACK, HOOK_DISPATCHER, HOOK_MEMFREE, HOOK_INSN_SLOT, HOOK_COUNT };
static struct ktg_hook ktg_hooks[HOOK_COUNT];

static void notrace ktg_wrap_prog_pack_free(struct bpf_binary_header *hdr)
{
	atomic_inc(&ktg_inflight);
	ktg_prog_pack_notice((unsigned long)hdr, 0, 0, 0, KTG_HOLD_SLEEP);
	((void (*)(struct bpf_binary_header *))ktg_hooks[HOOK_PROG_PACK].addr)(hdr);
	atomic_dec(&ktg_inflight);
}

static void notrace ktg_wrap_dispatcher_change_prog(struct bpf_dispatcher *d,
						   struct bpf_prog *from, struct bpf_prog *to)
{
	atomic_inc(&ktg_inflight);
	ktg_dispatcher_notice((unsigned long)d, (unsigned long)from, (unsigned long)to, 0,
			      KTG_HOLD_SLEEP);
	((void (*)(struct bpf_dispatcher *, struct bpf_prog *, struct bpf_prog *))
		 ktg_hooks[HOOK_DISPATCHER].addr)(d, from, to);
	atomic_dec(&ktg_inflight);
}

static void notrace ktg_wrap_module_memfree(void *region)
{
	/* Entered by redirection, not by a call: the return address is the
	 * call site in module_memfree's caller. */
	unsigned long caller = (unsigned long)__builtin_return_address(0);

	atomic_inc(&ktg_inflight);
	ktg_memfree_notice((unsigned long)region, 0, 0, caller, KTG_HOLD_SLEEP);
	((void (*)(void *))ktg_hooks[HOOK_MEMFREE].addr)(region);
	atomic_dec(&ktg_inflight);
}

static void notrace ktg_wrap_free_insn_slot(struct kprobe_insn_cache *c, kprobe_opcode_t *slot,
					     bool dirty)
{
	atomic_inc(&ktg_inflight);
	ktg_insn_slot_notice((unsigned long)c, (unsigned long)slot, dirty, 0, KTG_HOLD_SLEEP);
	((void (*)(struct kprobe_insn_cache *, kprobe_opcode_t *, bool))
		 ktg_hooks[HOOK_INSN_SLOT].addr)(c, slot, dirty);
	atomic_dec(&ktg_inflight);
}

static struct ktg_hook ktg_hooks[HOOK_COUNT] = {
	[HOOK_PROG_PACK] = { "bpf_prog_pack_free", ktg_prog_pack_notice, ktg_wrap_prog_pack_free },
	[HOOK_DISPATCHER] = { "bpf_dispatcher_change_prog", ktg_dispatcher_notice,
			      ktg_wrap_dispatcher_change_prog },
	[HOOK_MEMFREE] = { "module_memfree", ktg_memfree_notice, ktg_wrap_module_memfree },
	[HOOK_INSN_SLOT] = { "__free_insn_slot", ktg_insn_slot_notice, ktg_wrap_free_insn_slot },
};

/* ---- ftrace redirection ---- */

static void notrace ktg_ftrace_cb(unsigned long ip, unsigned long parent_ip,
				  struct ftrace_ops *op, struct ftrace_regs *fregs)
{
	int i;

	if (within_module(parent_ip, THIS_MODULE))
		return; /* the wrapper calling the original */
	for (i = 0; i < HOOK_COUNT; i++) {
		struct ktg_hook *h = &ktg_hooks[i];

		/* ip is the fentry call site: the symbol, or just past its endbr64. */
		if (h->how == HOW_FTRACE && ip >= h->addr && ip < h->addr + 16) {
			ftrace_instruction_pointer_set(fregs, (unsigned long)h->wrapper);
			return;
		}
	}
}

static struct ftrace_ops ktg_ftrace_ops = {
	.func = ktg_ftrace_cb,
	.flags = FTRACE_OPS_FL_SAVE_REGS | FTRACE_OPS_FL_IPMODIFY | FTRACE_OPS_FL_RECURSION,
};
static bool ktg_ftrace_registered;

/* ---- kprobe fallback: atomic context, so the hold spins ---- */

static int ktg_kprobe_pre(struct kprobe *kp, struct pt_regs *regs)
{
	struct ktg_hook *h = container_of(kp, struct ktg_hook, kp);

	/* At the function's entry the top of the stack is the return address. */
	h->notice(regs->di, regs->si, regs->dx, regs_get_kernel_stack_nth(regs, 0),
		  KTG_HOLD_SPIN);
	return 0;
}

/* The address of a kernel function, through kprobes' own lookup (kallsyms
 * lookups are not exported to modules since 5.7). kprobes place a probe on
 * a function's entry after its endbr64; the function itself starts at the
 * endbr64, which an indirect call must target when IBT is enforced. */
static unsigned long ktg_symbol_address(const char *symbol)
{
	static const u8 endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
	struct kprobe kp = { .symbol_name = symbol };
	unsigned long addr;
	u8 before[4];

	if (register_kprobe(&kp))
		return 0;
	addr = (unsigned long)kp.addr;
	unregister_kprobe(&kp);
	if (!copy_from_kernel_nofault(before, (void *)(addr - 4), 4) &&
	    !memcmp(before, endbr64, 4))
		addr -= 4;
	return addr;
}

static int ktg_use_kprobe(struct ktg_hook *h)
{
	int ret;

	memset(&h->kp, 0, sizeof(h->kp));
	h->kp.symbol_name = h->symbol;
	h->kp.pre_handler = ktg_kprobe_pre;
	ret = register_kprobe(&h->kp);
	h->how = ret ? HOW_NONE : HOW_KPROBE;
	return ret;
}

/* ---- module text: a module notifier (sleeps; no redirection needed) ----
 * MODULE_STATE_LIVE: do_init_module is about to queue the init region for
 * do_free_init (module_memfree after an RCU grace period); init text is done
 * running and still intact. MODULE_STATE_GOING: delete_module (after
 * mod->exit) or a failed load; core text (and init text on a failed init)
 * stays mapped until free_module. Blocking notifier chain: may sleep. */
static int ktg_module_event(struct notifier_block *nb, unsigned long action, void *data)
{
	struct module *mod = data;
	unsigned long init = (unsigned long)mod->init_layout.base;
	unsigned long core = (unsigned long)mod->core_layout.base;

	if ((action == MODULE_STATE_LIVE || action == MODULE_STATE_GOING) && init)
		ktg_guard(init, init + mod->init_layout.text_size, KTGUARD_KIND_MODULE_INIT,
			  KTG_HOLD_SLEEP);
	if (action == MODULE_STATE_GOING && core)
		ktg_guard(core, core + mod->core_layout.text_size, KTGUARD_KIND_MODULE_CORE,
			  KTG_HOLD_SLEEP);
	return NOTIFY_DONE;
}

static struct notifier_block ktg_module_nb = { .notifier_call = ktg_module_event };

/* "hooks": one line per hook: <kernel function> <ftrace|kprobe|none>. */
static int ktg_get_hooks(char *buf, const struct kernel_param *kp)
{
	static const char *const how[] = { "none", "ftrace", "kprobe" };
	int i, len = 0;

	for (i = 0; i < HOOK_COUNT; i++)
		len += scnprintf(buf + len, PAGE_SIZE - len, "%s %s\n", ktg_hooks[i].symbol,
				 how[ktg_hooks[i].how]);
	len += scnprintf(buf + len, PAGE_SIZE - len, "module_notifier notifier\n");
	return len;
}

static const struct kernel_param_ops ktg_hooks_ops = { .get = ktg_get_hooks };
module_param_cb(hooks, &ktg_hooks_ops, NULL, 0444);
MODULE_PARM_DESC(hooks, "how each hook is attached (read-only)");

/* Tests of the atomic path: every hook as a kprobe, holding by spinning. */
static bool ktg_force_kprobe;
module_param_named(force_kprobe, ktg_force_kprobe, bool, 0444);
MODULE_PARM_DESC(force_kprobe, "attach every hook with a kprobe (spinning holds), for tests");

/* Tests of a kernel that lacks a hooked function: the functions named here
 * (comma-separated) are left unhooked, as if the kernel had no such symbol.
 * The hooks parameter then shows them as "none", and the host copies what
 * they free best effort. */
static char *ktg_skip_hooks;
module_param_named(skip_hooks, ktg_skip_hooks, charp, 0444);
MODULE_PARM_DESC(skip_hooks, "comma-separated hooked functions to leave unhooked, as on a kernel without them (tests)");

static bool ktg_skipped(const char *symbol)
{
	size_t len = strlen(symbol);
	const char *p = ktg_skip_hooks;

	while (p && *p) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		if (n == len && !strncmp(p, symbol, len))
			return true;
		p = comma ? comma + 1 : NULL;
	}
	return false;
}

int ktg_hooks_init(void)
{
	int i, ret, any_ftrace = 0;

	for (i = 0; i < HOOK_COUNT; i++) {
		struct ktg_hook *h = &ktg_hooks[i];

		if (ktg_skipped(h->symbol)) {
			pr_warn("ktguard: %s left unhooked (skip_hooks); that path is not guarded\n", h->symbol);
			continue;
		}
		h->addr = ktg_symbol_address(h->symbol);
		if (!h->addr) {
			pr_warn("ktguard: %s not found; that path is not guarded\n", h->symbol);
			continue;
		}
		ret = ktg_force_kprobe ? -EPERM : ftrace_set_filter_ip(&ktg_ftrace_ops, h->addr, 0, 0);
		if (ret && !ktg_force_kprobe)
			ret = ftrace_set_filter(&ktg_ftrace_ops, (unsigned char *)h->symbol,
						strlen(h->symbol), 0);
		if (!ret) {
			h->how = HOW_FTRACE;
			any_ftrace = 1;
		} else if (ktg_use_kprobe(h)) {
			pr_warn("ktguard: cannot hook %s; that path is not guarded\n", h->symbol);
		}
	}
	if (any_ftrace) {
		ret = register_ftrace_function(&ktg_ftrace_ops);
		if (ret) {
			pr_warn("ktguard: ftrace redirection failed (%d); falling back to kprobes\n", ret);
			for (i = 0; i < HOOK_COUNT; i++)
				if (ktg_hooks[i].how == HOW_FTRACE)
					ktg_use_kprobe(&ktg_hooks[i]);
		} else {
			ktg_ftrace_registered = true;
		}
	}
	ret = register_module_notifier(&ktg_module_nb);
	if (ret) {
		ktg_hooks_exit();
		return ret;
	}
	for (i = 0; i < HOOK_COUNT; i++)
		pr_info("ktguard: hook %s: %s\n", ktg_hooks[i].symbol,
			ktg_hooks[i].how == HOW_FTRACE ? "ftrace (sleeps)" :
			ktg_hooks[i].how == HOW_KPROBE ? "kprobe (spins)" : "none");
	return 0;
}

void ktg_hooks_exit(void)
{
	int i;

	unregister_module_notifier(&ktg_module_nb);
	if (ktg_ftrace_registered) {
		unregister_ftrace_function(&ktg_ftrace_ops);
		ktg_ftrace_registered = false;
	}
	ftrace_free_filter(&ktg_ftrace_ops);
	for (i = 0; i < HOOK_COUNT; i++) {
		if (ktg_hooks[i].how == HOW_KPROBE)
			unregister_kprobe(&ktg_hooks[i].kp);
		ktg_hooks[i].how = HOW_NONE;
	}
	/* Holds already ended (ktg_chan_stop); wait for wrappers to return
	 * from the original functions. A task preempted between its
	 * atomic_dec and its ret is the window this does not close. */
	while (atomic_read(&ktg_inflight))
		msleep(1);
	synchronize_rcu();
}
