/* kthost_shared.h: the constants that the guest kit (ktguest, ktexec, ktguard),
 * the host (kthost) and the software PT plugin share. Each is defined here
 * once; code uses these names, never the numbers or strings. Plain C with no
 * includes, so that the kernel module can include it too. The scripts that
 * cannot include a header (vm-images/ktvm, vm-images/init,
 * kthost-libvirt.sh) are checked against it by the unit test
 * SharedConstants.ScriptsUseTheHeadersNames.
 *
 * The sideband wire protocol's own constants (message types, loss kinds, hold
 * status) are in guest-kit/proto/ktproto.h. */
#ifndef KTHOST_SHARED_H
#define KTHOST_SHARED_H

/* ---- virtio-serial port names (the <target name=...> of each channel) ---- */
#define KTHOST_PORT_SIDEBAND "org.kthost.0" /* ktguest <-> kthost: ktproto frames */
#define KTHOST_PORT_EXEC "org.kthost.exec"  /* ktexec <-> kthost: ktexec_proto.h */

/* ---- what a range of kernel text is ----
 * GUARD_NOTICE.kind carries values 1..9: what ktguard saw being freed
 * (ktguard_uapi.h's enum ktguard_kind is defined from these). A record in a
 * bundle's text.kts carries any of them: the guard's kind for text saved
 * under a hold, the others for text read when the guest announced it. */
enum kthost_text_kind {
  KTHOST_TEXT_BPF_PROG_PACK = 1,        /* a BPF JIT image (packed or large) */
  KTHOST_TEXT_BPF_DISPATCHER = 2,       /* the half of a dispatcher image about to be rewritten */
  KTHOST_TEXT_BPF_EXEC = 3,             /* bpf_jit_free_exec: trampoline, struct_ops or unpacked JIT */
  KTHOST_TEXT_BPF_TRAMPOLINE = 4,       /* a BPF trampoline image */
  KTHOST_TEXT_MODULE_CORE = 5,          /* a module's core .text */
  KTHOST_TEXT_MODULE_INIT = 6,          /* a module's init .text */
  KTHOST_TEXT_FTRACE_TRAMPOLINE = 7,    /* an ftrace trampoline */
  KTHOST_TEXT_KPROBE_INSN = 8,          /* a kprobe/optprobe instruction page */
  KTHOST_TEXT_MODULE_MEMFREE = 9,       /* module_memfree from a caller not recognised above */
  KTHOST_TEXT_GUARD_KIND_MAX = 9,
  KTHOST_TEXT_KSYMBOL_BPF = 0x101,      /* PERF_RECORD_KSYMBOL of type BPF */
  KTHOST_TEXT_KSYMBOL_OOL = 0x102,      /* PERF_RECORD_KSYMBOL of type OOL (out-of-line text) */
  KTHOST_TEXT_MODULE = 0x110            /* a module's .text, from MODULE_LOAD/UNLOAD */
};

/* A short name for logs and JSON ("bpf-prog-pack"), or "unknown". */
static inline const char* kthost_text_kind_name(unsigned kind) {
  switch (kind) {
    case KTHOST_TEXT_BPF_PROG_PACK: return "bpf-prog-pack";
    case KTHOST_TEXT_BPF_DISPATCHER: return "bpf-dispatcher";
    case KTHOST_TEXT_BPF_EXEC: return "bpf-exec";
    case KTHOST_TEXT_BPF_TRAMPOLINE: return "bpf-trampoline";
    case KTHOST_TEXT_MODULE_CORE: return "module-core";
    case KTHOST_TEXT_MODULE_INIT: return "module-init";
    case KTHOST_TEXT_FTRACE_TRAMPOLINE: return "ftrace-trampoline";
    case KTHOST_TEXT_KPROBE_INSN: return "kprobe-insn";
    case KTHOST_TEXT_MODULE_MEMFREE: return "module-memfree";
    case KTHOST_TEXT_KSYMBOL_BPF: return "ksymbol-bpf";
    case KTHOST_TEXT_KSYMBOL_OOL: return "ksymbol-ool";
    case KTHOST_TEXT_MODULE: return "module";
    default: return "unknown";
  }
}

/* ---- the software PT plugin's files ----
 * With out=DIR the plugin writes, per vCPU N: DIR/cpuN.pt (Intel PT packets),
 * DIR/cpuN.gt (ground truth, with gt=on) and DIR/cpuN.stats (key=value
 * counters, at exit). With trigger=PATH it traces only while PATH exists; a
 * trigger holding a process id is on only while that process lives (in the
 * plugin's pid namespace); one holding KTHOST_PT_TRIGGER_HEARTBEAT (a tracer
 * in another pid namespace) only while its mtime is under
 * KTHOST_PT_TRIGGER_HEARTBEAT_S old, the tracer touching it meanwhile. The
 * plugin looks at the trigger every KTHOST_PT_TRIGGER_POLL_MS. After each
 * switch-off, and at exit, it creates DIR/cpuN.stopped once vCPU N's stream
 * is wholly written (a reader removes the markers before switching on).
 * While the trigger is on, it keeps DIR/started, created only after every
 * vCPU's next block is traced: a reader removes it before switching on and
 * waits for it, so what the guest runs after that is in the trace. */
#define KTHOST_PT_FILE_PREFIX "cpu"
#define KTHOST_PT_FILE_PACKETS ".pt"
#define KTHOST_PT_FILE_GROUND_TRUTH ".gt"
#define KTHOST_PT_FILE_STATS ".stats"
#define KTHOST_PT_FILE_STOPPED ".stopped"
#define KTHOST_PT_FILE_STARTED "started"
#define KTHOST_PT_TRIGGER_POLL_MS 20
#define KTHOST_PT_TRIGGER_HEARTBEAT "heartbeat"
#define KTHOST_PT_TRIGGER_HEARTBEAT_S 10

#endif
