/* ktproto: the kthost sideband wire protocol, one codec for both sides.
 * ktguest (static C, in the guest) encodes; kthost (C++) decodes, and the
 * reverse for the few host->guest messages. The specification is PROTOCOL.md
 * beside this file; this header is its C form.
 *
 * Frame (all integers little-endian):
 *   offset size field
 *   0      4    magic    KTP_MAGIC ("KTSB")
 *   4      1    version  KTP_VERSION; a frame of another version is refused
 *   5      1    type     enum ktp_type
 *   6      2    flags    0 (reserved)
 *   8      4    length   payload bytes, <= KTP_MAX_PAYLOAD
 *   12     4    crc      CRC-32C of header (crc field as 0) and payload
 *   16     8    seq      sender's sequence number, +1 per frame, restarts at 0 with HELLO
 *   24     ...  payload  per type, below
 *
 * Payload primitives: u8/u16/u32/u64 little-endian; str = u16 length + bytes
 * (no NUL, <= KTP_MAX_STRING); blob = u16 length + bytes (<= KTP_MAX_BLOB).
 * Decoding never trusts a length: every read is bounds-checked against the
 * payload, and trailing bytes after a known payload are an error.
 */
#ifndef KTPROTO_H
#define KTPROTO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KTP_MAGIC 0x4253544bu /* "KTSB" */
#define KTP_VERSION 1u
#define KTP_HEADER_SIZE 24u
#define KTP_MAX_PAYLOAD (64u * 1024u)
#define KTP_MAX_FRAME (KTP_HEADER_SIZE + KTP_MAX_PAYLOAD)
#define KTP_MAX_STRING 512u
#define KTP_MAX_BLOB 256u       /* text_poke old/new bytes: the kernel's limit is far below */
#define KTP_MAX_BATCH 1024u     /* symbols per STATE_SYMBOLS frame */
#define KTP_MAX_CPUS 8192u

enum ktp_type {
  KTP_HELLO = 1,         /* guest->host, first frame of every connection */
  KTP_HELLO_ACK = 2,     /* host->guest */
  KTP_STATE_BEGIN = 3,   /* guest->host: a state dump follows */
  KTP_STATE_SYMBOLS = 4, /* a batch of kallsyms entries */
  KTP_STATE_MODULE = 5,  /* one loaded module */
  KTP_STATE_BPF = 6,     /* one loaded BPF program */
  KTP_STATE_CPUS = 7,    /* online CPUs */
  KTP_STATE_END = 8,
  KTP_KSYMBOL = 9,       /* PERF_RECORD_KSYMBOL */
  KTP_BPF_EVENT = 10,    /* PERF_RECORD_BPF_EVENT */
  KTP_TEXT_POKE = 11,    /* PERF_RECORD_TEXT_POKE */
  KTP_MODULE_LOAD = 12,
  KTP_MODULE_UNLOAD = 13,
  KTP_LOST = 14,         /* records lost, by kind and CPU */
  KTP_GUARD_NOTICE = 15, /* guest->host: text [start,end) is about to be freed; guest holds */
  KTP_GUARD_ACK = 16,    /* host->guest: saved (or not); guest may continue */
  KTP_HEARTBEAT = 17,    /* guest->host, periodic, with counters */
  KTP_CLOCK = 18,        /* guest->host: perf clock parameters changed */
  KTP_ERROR = 19,        /* either way: a human-readable reason, then the sender closes */
  KTP_HOST_HELLO = 20,   /* host->guest, first frame of every host connection: start over with
                            HELLO and a state dump (a quick disconnect+reconnect may be invisible
                            to the guest's port, so the host says so itself) */
  KTP_TYPE_MAX = 20
};

/* Guest time: perf clock (ns) plus what turns it into guest TSC. When
 * cap_user_time_zero is 1: tsc = ((time - time_zero) << time_shift) / time_mult,
 * computed as perf documents (quot/rem split to avoid overflow). */
struct ktp_clock {
  uint64_t time_zero;
  uint32_t time_mult;
  uint16_t time_shift;
  uint8_t cap_user_time_zero;
};

struct ktp_str {
  const char* data; /* points into the frame (decode) or caller memory (encode) */
  uint16_t len;
};

struct ktp_hello {
  uint16_t proto_minor;
  uint32_t cpu_count;
  uint64_t boot_time_ns; /* perf clock at hello */
  uint64_t session;      /* random per ktguest start: the host sees a restart */
  struct ktp_clock clock;
  struct ktp_str release;  /* uname -r */
  struct ktp_str build_id; /* hex of the kernel's GNU build id, or empty */
};

struct ktp_hello_ack {
  uint16_t proto_minor;
  uint32_t flags; /* KTP_ACK_* */
};
#define KTP_ACK_GUARD_ENABLED 1u /* host will answer GUARD_NOTICE */

enum ktp_state_reason { KTP_STATE_START = 1, KTP_STATE_RECONNECT = 2 };
struct ktp_state_begin {
  uint64_t time;
  uint32_t reason; /* enum ktp_state_reason */
  uint32_t symbols; /* how many STATE_SYMBOLS entries follow in all */
  uint32_t modules;
  uint32_t bpf_progs;
};

struct ktp_symbol {
  uint64_t addr;
  uint8_t type; /* kallsyms letter */
  struct ktp_str name;
  struct ktp_str module; /* "" for vmlinux, "bpf" for BPF */
};
struct ktp_state_symbols {
  uint32_t count; /* <= KTP_MAX_BATCH */
  struct ktp_symbol* symbols; /* encode: input array; decode: caller-provided array of KTP_MAX_BATCH */
};

struct ktp_module {
  uint64_t time;
  struct ktp_str name;
  uint64_t text_addr; /* /sys/module/NAME/sections/.text */
  uint64_t text_size; /* executable bytes from text_addr; 0 when unknown */
  uint64_t core_addr; /* /proc/modules address */
  uint64_t core_size; /* /proc/modules size */
};

struct ktp_bpf_prog {
  uint32_t id;
  uint32_t prog_type;
  uint8_t tag[8];
  struct ktp_str name;
  uint64_t jited_addr;
  uint32_t jited_len;
};

struct ktp_cpus {
  uint32_t count; /* <= KTP_MAX_CPUS */
  uint32_t* cpus; /* encode: input; decode: caller array of KTP_MAX_CPUS */
};

struct ktp_ksymbol {
  uint64_t time;
  uint32_t cpu;
  uint64_t addr;
  uint32_t len;
  uint16_t ksym_type; /* PERF_RECORD_KSYMBOL_TYPE_* */
  uint16_t flags;     /* PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER = 1 */
  struct ktp_str name;
};

struct ktp_bpf_event {
  uint64_t time;
  uint32_t cpu;
  uint16_t type;  /* PERF_BPF_EVENT_PROG_LOAD = 1, PROG_UNLOAD = 2 */
  uint16_t flags;
  uint32_t id;
  uint8_t tag[8];
};

struct ktp_text_poke {
  uint64_t time;
  uint32_t cpu;
  uint64_t addr;
  uint16_t old_len;
  uint16_t new_len;
  const uint8_t* old_bytes;
  const uint8_t* new_bytes;
};

enum ktp_lost_kind {
  KTP_LOST_PERF_RING = 1,   /* PERF_RECORD_LOST in a perf ring: count = records */
  KTP_LOST_QUEUE = 2,       /* ktguest's own queue overflowed (host slow/absent): count = frames */
  KTP_LOST_GUARD_TIMEOUT = 3, /* guard holds that ended without the host's ack (timeout, reader gone, ...) */
  KTP_LOST_MODULE_RACE = 4,  /* a module vanished before its ranges could be read */
  KTP_LOST_GUARD_UNGUARDED = 5 /* frees ktguard saw while no host held the guard open */
};
/* record_type of a guard LOST (kinds 3 and 5) sent at the start of every
 * session: count is then ktguard's total since it was loaded, not new losses
 * (frames of an earlier session may have died with that host). */
#define KTP_LOST_TOTAL_SINCE_LOAD 0xFFFFFFFFu
struct ktp_lost {
  uint64_t time;
  uint32_t cpu;  /* UINT32_MAX when not per CPU */
  uint32_t kind; /* enum ktp_lost_kind */
  uint32_t record_type; /* for PERF_RING: 0 (unknown); for QUEUE: the ktp_type dropped, 0 = mixed */
  uint64_t count;
};

struct ktp_guard_notice {
  uint64_t time;
  uint32_t cpu;
  uint64_t id;
  uint64_t start, end;
  uint32_t kind; /* what is freed: ktguard's enum ktguard_kind (1..9) */
  uint64_t ack_addr; /* guest-physical u64 the host may set to id (0: none) */
};

struct ktp_guard_ack {
  uint64_t id;
  uint32_t status; /* 0 saved, 1 could not save */
};

struct ktp_heartbeat {
  uint64_t time;
  uint64_t frames_sent;
  uint64_t perf_records;  /* records read from perf rings */
  uint64_t text_pokes;    /* TEXT_POKE records read */
  uint64_t lost_records;  /* PERF_RECORD_LOST totals */
  uint64_t queue_dropped; /* frames dropped from ktguest's queue */
};

struct ktp_error {
  struct ktp_str message;
};

/* A decoded frame header plus a view of its payload. */
struct ktp_frame {
  uint8_t type;
  uint64_t seq;
  const uint8_t* payload;
  uint32_t length;
};

enum ktp_status {
  KTP_OK = 0,
  KTP_NEED_MORE = 1,       /* not an error: a partial frame, read more bytes */
  KTP_ERR_MAGIC = -1,      /* no magic at the start: resynchronise */
  KTP_ERR_VERSION = -2,    /* peer speaks another protocol version */
  KTP_ERR_LENGTH = -3,     /* length > KTP_MAX_PAYLOAD */
  KTP_ERR_CRC = -4,        /* checksum mismatch */
  KTP_ERR_TYPE = -5,       /* unknown type */
  KTP_ERR_TRUNCATED = -6,  /* payload shorter than its fields */
  KTP_ERR_TRAILING = -7,   /* payload longer than its fields */
  KTP_ERR_BOUNDS = -8,     /* a count or length inside the payload is over its limit */
  KTP_ERR_SPACE = -9       /* encode: output buffer too small */
};
const char* ktp_status_name(int status);

/* CRC-32C (Castagnoli). Start with crc = 0; the init and final xor are done
 * inside, so calls chain: ktp_crc32c(ktp_crc32c(0, a), b) is the CRC of a+b.
 * ktp_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t ktp_crc32c(uint32_t crc, const void* data, size_t len);

/* Decodes one frame header at buf[0..len). On KTP_OK fills *frame (payload
 * points into buf) and *consumed = header + payload; *frame is written only on
 * KTP_OK. KTP_NEED_MORE (*consumed = 0): fewer bytes than the frame needs.
 * Checks run in this order: MAGIC (also on a mismatching partial magic),
 * VERSION, LENGTH, then, once the whole frame is in buf, CRC and TYPE.
 * *consumed = 1 for MAGIC, VERSION, LENGTH and CRC: the header is not to be
 * trusted, so the caller skips one byte and resynchronises with
 * ktp_find_magic. For TYPE (a frame with a valid CRC but a type this codec
 * does not know) *consumed is the whole frame, so the caller can skip it. */
int ktp_decode_frame(const uint8_t* buf, size_t len, struct ktp_frame* frame, size_t* consumed);
/* Offset of the next KTP_MAGIC in buf[0..len) (len if none; a partial magic
 * at the end returns its offset). */
size_t ktp_find_magic(const uint8_t* buf, size_t len);

/* Payload parsers: each checks every length and that the payload is exactly
 * consumed. Strings and byte arrays point into the frame. Errors: TYPE (the
 * frame is not of a type this parser accepts), TRUNCATED, TRAILING, BOUNDS.
 * The output is written only on KTP_OK, except the caller's symbols/cpus
 * array, whose slots may be overwritten before an error is found. */
int ktp_parse_hello(const struct ktp_frame* f, struct ktp_hello* out);
int ktp_parse_hello_ack(const struct ktp_frame* f, struct ktp_hello_ack* out);
int ktp_parse_host_hello(const struct ktp_frame* f, struct ktp_hello_ack* out); /* same payload as HELLO_ACK */
int ktp_parse_state_begin(const struct ktp_frame* f, struct ktp_state_begin* out);
int ktp_parse_state_symbols(const struct ktp_frame* f, struct ktp_state_symbols* out); /* out->symbols: KTP_MAX_BATCH slots */
int ktp_parse_module(const struct ktp_frame* f, struct ktp_module* out); /* STATE_MODULE, MODULE_LOAD, MODULE_UNLOAD */
int ktp_parse_bpf_prog(const struct ktp_frame* f, struct ktp_bpf_prog* out);
int ktp_parse_cpus(const struct ktp_frame* f, struct ktp_cpus* out); /* out->cpus: KTP_MAX_CPUS slots */
int ktp_parse_state_end(const struct ktp_frame* f, uint64_t* time);
int ktp_parse_ksymbol(const struct ktp_frame* f, struct ktp_ksymbol* out);
int ktp_parse_bpf_event(const struct ktp_frame* f, struct ktp_bpf_event* out);
int ktp_parse_text_poke(const struct ktp_frame* f, struct ktp_text_poke* out);
int ktp_parse_lost(const struct ktp_frame* f, struct ktp_lost* out);
int ktp_parse_guard_notice(const struct ktp_frame* f, struct ktp_guard_notice* out);
int ktp_parse_guard_ack(const struct ktp_frame* f, struct ktp_guard_ack* out);
int ktp_parse_heartbeat(const struct ktp_frame* f, struct ktp_heartbeat* out);
int ktp_parse_clock(const struct ktp_frame* f, uint64_t* time, struct ktp_clock* out);
int ktp_parse_error(const struct ktp_frame* f, struct ktp_error* out);

/* Encoders: write a whole frame (header + payload) into buf[0..cap) and
 * return its size, or a negative status: KTP_ERR_BOUNDS when an input
 * string/blob/array is over its limit; KTP_ERR_LENGTH when the payload would
 * exceed KTP_MAX_PAYLOAD (a STATE_SYMBOLS batch of long names can: send
 * smaller batches); KTP_ERR_SPACE when cap is too small (KTP_MAX_FRAME always
 * suffices); KTP_ERR_TYPE when ktp_encode_module's `type` is not
 * KTP_STATE_MODULE, KTP_MODULE_LOAD or KTP_MODULE_UNLOAD. On error buf may
 * have been partly written. */
long ktp_encode_hello(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_hello* m);
long ktp_encode_hello_ack(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_hello_ack* m);
long ktp_encode_host_hello(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_hello_ack* m);
long ktp_encode_state_begin(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_state_begin* m);
long ktp_encode_state_symbols(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_state_symbols* m);
long ktp_encode_module(uint8_t* buf, size_t cap, uint64_t seq, uint8_t type, const struct ktp_module* m);
long ktp_encode_bpf_prog(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_bpf_prog* m);
long ktp_encode_cpus(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_cpus* m);
long ktp_encode_state_end(uint8_t* buf, size_t cap, uint64_t seq, uint64_t time);
long ktp_encode_ksymbol(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_ksymbol* m);
long ktp_encode_bpf_event(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_bpf_event* m);
long ktp_encode_text_poke(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_text_poke* m);
long ktp_encode_lost(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_lost* m);
long ktp_encode_guard_notice(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_guard_notice* m);
long ktp_encode_guard_ack(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_guard_ack* m);
long ktp_encode_heartbeat(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_heartbeat* m);
long ktp_encode_clock(uint8_t* buf, size_t cap, uint64_t seq, uint64_t time, const struct ktp_clock* m);
long ktp_encode_error(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_error* m);

#ifdef __cplusplus
}
#endif

#endif
