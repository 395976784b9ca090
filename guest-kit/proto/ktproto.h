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

#include "ktproto_schema.h"

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
#define KTP_MAX_SWITCH_WORDS 1024u /* TASK_SWITCHES: 512 switches per frame */

/* Every message, struct and field below is expanded from the tables in
 * ktproto_schema.h; this header only says how each kind of field looks in C. */
#define KTP_ENUM_TYPE(NAME, num, fn, payload, sender) KTP_##NAME = num,
#define KTP_COUNT_ONE(...) +1
enum ktp_type {
  KTP_MESSAGES(KTP_ENUM_TYPE)
  KTP_TYPE_MAX = 0 KTP_MESSAGES(KTP_COUNT_ONE) /* numbers run 1..KTP_TYPE_MAX */
};

/* Who may send a message (ktp_type_sender). */
enum ktp_sender { KTP_SENDER_GUEST = 1, KTP_SENDER_HOST = 2, KTP_SENDER_EITHER = 3 };

struct ktp_str {
  const char* data; /* points into the frame (decode) or caller memory (encode) */
  uint16_t len;
};

#define KTP_DECL_U8(n, a) uint8_t n;
#define KTP_DECL_U16(n, a) uint16_t n;
#define KTP_DECL_U32(n, a) uint32_t n;
#define KTP_DECL_U64(n, a) uint64_t n;
#define KTP_DECL_STR(n, a) struct ktp_str n;
#define KTP_DECL_TAG(n, a) uint8_t n[8];
#define KTP_DECL_BLOB(n, a) \
  uint16_t n##_len;         \
  const uint8_t* n##_bytes; /* into the frame (decode) or caller memory (encode) */
#define KTP_DECL_CLOCK(n, a) struct ktp_clock n;
#define KTP_DECL_SYMBOLS(n, a) \
  uint32_t count;              \
  struct ktp_symbol* n; /* encode: input; decode: storage for a entries */
#define KTP_DECL_U32S(n, a) \
  uint32_t count;           \
  uint32_t* n; /* encode: input; decode: storage for a entries */
#define KTP_DECL_FIELD(kind, n, a) KTP_DECL_##kind(n, a)
#define KTP_DECL_RECORD(r) struct ktp_##r { KTP_RECORD_##r(KTP_DECL_FIELD) };
#define KTP_DECL_PAYLOAD(p) struct ktp_##p { KTP_PAYLOAD_##p(KTP_DECL_FIELD) };
KTP_RECORDS(KTP_DECL_RECORD)
KTP_PAYLOADS(KTP_DECL_PAYLOAD)

#define KTP_ACK_GUARD_ENABLED 1u /* HELLO_ACK flags: host will answer GUARD_NOTICE */

enum ktp_state_reason { KTP_STATE_START = 1, KTP_STATE_RECONNECT = 2 };

/* GUARD_STATE: whether the guest's frees of kernel text are held. */
enum ktp_guard_mode {
  KTP_GUARD_ON = 1,     /* ktguard is open: frees wait for the host */
  KTP_GUARD_ABSENT = 2, /* the host asked for it, but ktguard cannot be opened (not loaded, no such kernel) */
  KTP_GUARD_OFF = 3     /* it was on and stopped (device error, host gone) */
};
/* proto_minor 1: GUARD_STATE exists. 2: GUARD_HOOKS exists. 3: TASK_SWITCHES exists. */
#define KTP_PROTO_MINOR 3u

/* GUARD_ACK status. */
enum ktp_hold_status { KTP_HOLD_SAVED = 0, KTP_HOLD_NOT_SAVED = 1 };

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

/* Per message, generated from KTP_MESSAGES: for message NAME with function
 * name fn and payload p,
 *   int  ktp_parse_fn(const struct ktp_frame* f, struct ktp_p* out);
 *   long ktp_encode_fn(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_p* m);
 * for example ktp_parse_hello, ktp_encode_state_module, ktp_encode_clock.
 *
 * Parsers check every length and that the payload is exactly consumed.
 * Strings and byte arrays point into the frame. Errors: TYPE (the frame is not
 * that message), TRUNCATED, TRAILING, BOUNDS. The output is written only on
 * KTP_OK, except the array a SYMBOLS or U32S field points to (the caller
 * provides it, with room for the field's limit), whose slots may be
 * overwritten before an error is found.
 *
 * Encoders write a whole frame (header + payload) into buf[0..cap) and return
 * its size, or a negative status: KTP_ERR_BOUNDS when an input
 * string/blob/array is over its limit; KTP_ERR_LENGTH when the payload would
 * exceed KTP_MAX_PAYLOAD (a STATE_SYMBOLS batch of long names can: send
 * smaller batches); KTP_ERR_SPACE when cap is too small (KTP_MAX_FRAME always
 * suffices). On error buf may have been partly written. */
#define KTP_DECL_MESSAGE_API(NAME, num, fn, p, sender)                  \
  int ktp_parse_##fn(const struct ktp_frame* f, struct ktp_##p* out); \
  long ktp_encode_##fn(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_##p* m);
KTP_MESSAGES(KTP_DECL_MESSAGE_API)

/* Any message: its type and its payload (the union member named after it). */
#define KTP_UNION_MEMBER(p) struct ktp_##p p;
struct ktp_message {
  uint8_t type;
  union {
    KTP_PAYLOADS(KTP_UNION_MEMBER)
  } u;
};
/* Room for the arrays a parsed message points to (about 80 KiB). */
#define KTP_STORE_U8(n, a)
#define KTP_STORE_U16(n, a)
#define KTP_STORE_U32(n, a)
#define KTP_STORE_U64(n, a)
#define KTP_STORE_STR(n, a)
#define KTP_STORE_TAG(n, a)
#define KTP_STORE_BLOB(n, a)
#define KTP_STORE_CLOCK(n, a)
#define KTP_STORE_SYMBOLS(n, a) struct ktp_symbol n[a];
#define KTP_STORE_U32S(n, a) uint32_t n[a];
#define KTP_STORE_FIELD(kind, n, a) KTP_STORE_##kind(n, a)
#define KTP_STORE_PAYLOAD(p) KTP_PAYLOAD_##p(KTP_STORE_FIELD)
struct ktp_message_storage {
  KTP_PAYLOADS(KTP_STORE_PAYLOAD)
};

/* Parses a frame of any known type into *out (arrays into *storage).
 * Errors as the per-message parsers; TYPE for a type no message has. */
int ktp_parse_message(const struct ktp_frame* f, struct ktp_message* out, struct ktp_message_storage* storage);
/* Encodes out->type's payload from the matching union member. */
long ktp_encode_message(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_message* m);

/* The message's name ("HELLO"), or NULL for an unknown type. */
const char* ktp_type_name(unsigned type);
/* enum ktp_sender, or 0 for an unknown type. */
int ktp_type_sender(unsigned type);

/* Calls fn once for every byte range a parsed message points to (its strings
 * and blobs, those of its array entries too), so a caller can check that they
 * lie inside the frame. */
typedef void (*ktp_view_fn)(void* ctx, const void* data, size_t len);
void ktp_message_views(const struct ktp_message* m, ktp_view_fn fn, void* ctx);

#ifdef __cplusplus
}
#endif

#endif
