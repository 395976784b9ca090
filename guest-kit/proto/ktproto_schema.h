/* ktproto_schema.h: the one definition of every sideband message.
 *
 * The message structs, their parsers and encoders (ktproto_codec.c), the
 * host's generic dispatch (ktp_parse_message), the fuzz target and the test
 * that checks PROTOCOL.md are all expanded from these tables. To add a field,
 * add it here and to PROTOCOL.md's table; the test says when the two differ.
 *
 * A field is F(KIND, name, arg), in wire order. Kinds:
 *   U8 U16 U32 U64   little-endian integer; arg unused (_)
 *   STR              u16 length + bytes, <= KTP_MAX_STRING; struct ktp_str
 *   TAG              8 bytes (a BPF program tag); uint8_t name[8]
 *   BLOB             u16 length + bytes, <= KTP_MAX_BLOB; in C the two
 *                    members name_len and name_bytes
 *   CLOCK            the ktp_clock record, inline
 *   SYMBOLS          u32 count + count ktp_symbol records, count <= arg; in C
 *                    `uint32_t count` and `struct ktp_symbol* name`
 *   U32S             u32 count + count u32, count <= arg; in C `uint32_t count`
 *                    and `uint32_t* name`
 * A payload holds at most one SYMBOLS or U32S field (its count is `count`).
 * Records (fields inlined into a payload, or repeated in SYMBOLS) are written
 * the same way but hold no arrays. */
#ifndef KTPROTO_SCHEMA_H
#define KTPROTO_SCHEMA_H

/* ---- records ---- */

/* Guest time: perf clock (ns) plus what turns it into guest TSC. When
 * cap_user_time_zero is 1: tsc = ((time - time_zero) << time_shift) / time_mult,
 * computed as perf documents (quot/rem split to avoid overflow). */
#define KTP_RECORD_clock(F) \
  F(U64, time_zero, _)      \
  F(U32, time_mult, _)      \
  F(U16, time_shift, _)     \
  F(U8, cap_user_time_zero, _)

/* One kallsyms entry. */
#define KTP_RECORD_symbol(F) \
  F(U64, addr, _)            \
  F(U8, type, _)      /* kallsyms letter */ \
  F(STR, name, _)            \
  F(STR, module, _)   /* "" for vmlinux, "bpf" for BPF */

#define KTP_RECORDS(R) R(clock) R(symbol)

/* ---- payloads ---- */

#define KTP_PAYLOAD_hello(F)                                                        \
  F(U16, proto_minor, _)                                                            \
  F(U32, cpu_count, _)                                                              \
  F(U64, boot_time_ns, _) /* perf clock at hello */                                 \
  F(U64, session, _)      /* random per ktguest start: the host sees a restart */   \
  F(CLOCK, clock, _)                                                                \
  F(STR, release, _)      /* uname -r */                                            \
  F(STR, build_id, _)     /* hex of the kernel's GNU build id, or empty */

#define KTP_PAYLOAD_hello_ack(F) \
  F(U16, proto_minor, _)         \
  F(U32, flags, _) /* KTP_ACK_* */

#define KTP_PAYLOAD_state_begin(F)                                \
  F(U64, time, _)                                                 \
  F(U32, reason, _)    /* enum ktp_state_reason */                \
  F(U32, symbols, _)   /* how many STATE_SYMBOLS entries follow */ \
  F(U32, modules, _)                                              \
  F(U32, bpf_progs, _)

#define KTP_PAYLOAD_state_symbols(F) F(SYMBOLS, symbols, KTP_MAX_BATCH)

#define KTP_PAYLOAD_module(F)                                            \
  F(U64, time, _)                                                        \
  F(STR, name, _)                                                        \
  F(U64, text_addr, _) /* /sys/module/NAME/sections/.text */             \
  F(U64, text_size, _) /* executable bytes from text_addr; 0 when unknown */ \
  F(U64, core_addr, _) /* /proc/modules address */                       \
  F(U64, core_size, _) /* /proc/modules size */

#define KTP_PAYLOAD_bpf_prog(F) \
  F(U32, id, _)                 \
  F(U32, prog_type, _)          \
  F(TAG, tag, _)                \
  F(STR, name, _)               \
  F(U64, jited_addr, _)         \
  F(U32, jited_len, _)

#define KTP_PAYLOAD_cpus(F) F(U32S, cpus, KTP_MAX_CPUS)

#define KTP_PAYLOAD_state_end(F) F(U64, time, _)

#define KTP_PAYLOAD_ksymbol(F)                                  \
  F(U64, time, _)                                               \
  F(U32, cpu, _)                                                \
  F(U64, addr, _)                                               \
  F(U32, len, _)                                                \
  F(U16, ksym_type, _) /* PERF_RECORD_KSYMBOL_TYPE_* */         \
  F(U16, flags, _)     /* PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER = 1 */ \
  F(STR, name, _)

#define KTP_PAYLOAD_bpf_event(F)                                 \
  F(U64, time, _)                                                \
  F(U32, cpu, _)                                                 \
  F(U16, type, _) /* PERF_BPF_EVENT_PROG_LOAD = 1, PROG_UNLOAD = 2 */ \
  F(U16, flags, _)                                               \
  F(U32, id, _)                                                  \
  F(TAG, tag, _)

#define KTP_PAYLOAD_text_poke(F) \
  F(U64, time, _)                \
  F(U32, cpu, _)                 \
  F(U64, addr, _)                \
  F(BLOB, old, _)                \
  F(BLOB, new, _)

#define KTP_PAYLOAD_lost(F)                                                            \
  F(U64, time, _)                                                                      \
  F(U32, cpu, _)         /* UINT32_MAX when not per CPU */                             \
  F(U32, kind, _)        /* enum ktp_lost_kind */                                      \
  F(U32, record_type, _) /* PERF_RING: 0; QUEUE: the ktp_type dropped, 0 = mixed */    \
  F(U64, count, _)

#define KTP_PAYLOAD_guard_notice(F)                                                 \
  F(U64, time, _)                                                                   \
  F(U32, cpu, _)                                                                    \
  F(U64, id, _)                                                                     \
  F(U64, start, _)                                                                  \
  F(U64, end, _)                                                                    \
  F(U32, kind, _)     /* what is freed: enum ktguard_kind (kthost_shared.h) */       \
  F(U64, ack_addr, _) /* guest-physical u64 the host may set to id (0: none) */

#define KTP_PAYLOAD_guard_ack(F) \
  F(U64, id, _)                  \
  F(U32, status, _) /* enum ktp_hold_status */

#define KTP_PAYLOAD_heartbeat(F)                                 \
  F(U64, time, _)                                                \
  F(U64, frames_sent, _)                                         \
  F(U64, perf_records, _)  /* records read from perf rings */    \
  F(U64, text_pokes, _)    /* TEXT_POKE records read */          \
  F(U64, lost_records, _)  /* PERF_RECORD_LOST totals */         \
  F(U64, queue_dropped, _) /* frames dropped from ktguest's queue */

#define KTP_PAYLOAD_clock_change(F) \
  F(U64, time, _)                   \
  F(CLOCK, clock, _)

#define KTP_PAYLOAD_error(F) F(STR, message, _)

#define KTP_PAYLOAD_guard_state(F)                           \
  F(U64, time, _)                                            \
  F(U32, state, _)  /* enum ktp_guard_mode */               \
  F(STR, reason, _) /* why, for ABSENT and OFF ("" for ON) */

#define KTP_PAYLOAD_guard_hooks(F)                                                    \
  F(U64, time, _)                                                                     \
  F(STR, hooks, _) /* ktguard's hooks parameter: "<kernel function> <how>" per line */

/* The switches away from a task on one CPU, in order: perf's
 * PERF_RECORD_SWITCH_CPU_WIDE out-records (made in prepare_task_switch, just
 * before __switch_to_asm runs). `switches` holds pairs (ns after `time`, the
 * tid switched to); `time` is the first switch's guest perf time, and every
 * pair lies within 2^32 ns of it. */
#define KTP_PAYLOAD_task_switches(F)                                       \
  F(U64, time, _)                                                          \
  F(U32, cpu, _)                                                           \
  F(U32S, switches, KTP_MAX_SWITCH_WORDS) /* 2 words per switch */

#define KTP_PAYLOADS(P)                                                                             \
  P(hello) P(hello_ack) P(state_begin) P(state_symbols) P(module) P(bpf_prog) P(cpus) P(state_end) \
  P(ksymbol) P(bpf_event) P(text_poke) P(lost) P(guard_notice) P(guard_ack) P(heartbeat)           \
  P(clock_change) P(error) P(guard_state) P(guard_hooks) P(task_switches)

/* ---- messages ----
 * M(NAME, type number, function name, payload, sender). Sender: GUEST, HOST or
 * EITHER. Type numbers run from 1 without gaps (a unit test checks). */
#define KTP_MESSAGES(M)                                            \
  M(HELLO, 1, hello, hello, GUEST)                                 \
  M(HELLO_ACK, 2, hello_ack, hello_ack, HOST)                      \
  M(STATE_BEGIN, 3, state_begin, state_begin, GUEST)               \
  M(STATE_SYMBOLS, 4, state_symbols, state_symbols, GUEST)         \
  M(STATE_MODULE, 5, state_module, module, GUEST)                  \
  M(STATE_BPF, 6, state_bpf, bpf_prog, GUEST)                      \
  M(STATE_CPUS, 7, state_cpus, cpus, GUEST)                        \
  M(STATE_END, 8, state_end, state_end, GUEST)                     \
  M(KSYMBOL, 9, ksymbol, ksymbol, GUEST)                           \
  M(BPF_EVENT, 10, bpf_event, bpf_event, GUEST)                    \
  M(TEXT_POKE, 11, text_poke, text_poke, GUEST)                    \
  M(MODULE_LOAD, 12, module_load, module, GUEST)                   \
  M(MODULE_UNLOAD, 13, module_unload, module, GUEST)               \
  M(LOST, 14, lost, lost, GUEST)                                   \
  M(GUARD_NOTICE, 15, guard_notice, guard_notice, GUEST)           \
  M(GUARD_ACK, 16, guard_ack, guard_ack, HOST)                     \
  M(HEARTBEAT, 17, heartbeat, heartbeat, GUEST)                    \
  M(CLOCK, 18, clock, clock_change, GUEST)                         \
  M(ERROR, 19, error, error, EITHER)                               \
  M(HOST_HELLO, 20, host_hello, hello_ack, HOST)                   \
  M(GUARD_STATE, 21, guard_state, guard_state, GUEST) /* minor 1 */ \
  M(GUARD_HOOKS, 22, guard_hooks, guard_hooks, GUEST) /* minor 2 */ \
  M(TASK_SWITCHES, 23, task_switches, task_switches, GUEST) /* minor 3 */

#endif
