/* Private to the ktproto sources: little-endian readers and writers.
 *
 * Both keep a sticky error so a parser or encoder can be written as a flat
 * list of fields and check once at the end; after the first failure every read
 * returns 0 and no byte is read past the payload. */
#ifndef KTPROTO_INTERNAL_H
#define KTPROTO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ktproto.h"

/* Byte-wise so that the code needs no alignment and works on any host byte
 * order; compilers turn these into single loads and stores on x86-64. */
static inline uint16_t ktp_le16(const uint8_t* p) {
  return (uint16_t)(p[0] | (uint16_t)(p[1] << 8));
}
static inline uint32_t ktp_le32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t ktp_le64(const uint8_t* p) {
  return (uint64_t)ktp_le32(p) | ((uint64_t)ktp_le32(p + 4) << 32);
}
static inline void ktp_put_le16(uint8_t* p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void ktp_put_le32(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}
static inline void ktp_put_le64(uint8_t* p, uint64_t v) {
  ktp_put_le32(p, (uint32_t)v);
  ktp_put_le32(p + 4, (uint32_t)(v >> 32));
}

/* ---- decoding ---- */

struct ktp_reader {
  const uint8_t* p;
  uint32_t left;
  int err; /* first failure, KTP_OK while none */
};

static inline struct ktp_reader ktp_reader_of(const struct ktp_frame* f) {
  struct ktp_reader r;
  r.p = f->payload;
  r.left = f->length;
  r.err = KTP_OK;
  return r;
}

/* Returns a pointer to n readable bytes, or NULL (and sets the error). */
static inline const uint8_t* ktp_take(struct ktp_reader* r, uint32_t n) {
  const uint8_t* at;
  if (r->err != KTP_OK)
    return NULL;
  if (n > r->left) {
    r->err = KTP_ERR_TRUNCATED;
    return NULL;
  }
  at = r->p;
  r->p += n;
  r->left -= n;
  return at;
}

static inline uint8_t ktp_get_u8(struct ktp_reader* r) {
  const uint8_t* p = ktp_take(r, 1);
  return p ? p[0] : 0;
}
static inline uint16_t ktp_get_u16(struct ktp_reader* r) {
  const uint8_t* p = ktp_take(r, 2);
  return p ? ktp_le16(p) : 0;
}
static inline uint32_t ktp_get_u32(struct ktp_reader* r) {
  const uint8_t* p = ktp_take(r, 4);
  return p ? ktp_le32(p) : 0;
}
static inline uint64_t ktp_get_u64(struct ktp_reader* r) {
  const uint8_t* p = ktp_take(r, 8);
  return p ? ktp_le64(p) : 0;
}
static inline void ktp_get_bytes(struct ktp_reader* r, uint8_t* out, uint32_t n) {
  const uint8_t* p = ktp_take(r, n);
  if (p)
    memcpy(out, p, n);
  else
    memset(out, 0, n);
}

/* u16 length + bytes; the length is checked against `limit` before the
 * payload, so an oversized claim is BOUNDS even when it is also truncated. */
static inline const uint8_t* ktp_get_sized(struct ktp_reader* r, uint32_t limit, uint16_t* len) {
  uint16_t n = ktp_get_u16(r);
  const uint8_t* p;
  *len = 0;
  if (r->err != KTP_OK)
    return NULL;
  if (n > limit) {
    r->err = KTP_ERR_BOUNDS;
    return NULL;
  }
  p = ktp_take(r, n);
  if (p)
    *len = n;
  return p;
}
static inline struct ktp_str ktp_get_str(struct ktp_reader* r) {
  struct ktp_str s;
  s.data = (const char*)ktp_get_sized(r, KTP_MAX_STRING, &s.len);
  return s;
}

/* A parser's verdict: its first error, else TRAILING if bytes remain. */
static inline int ktp_reader_finish(const struct ktp_reader* r) {
  if (r->err != KTP_OK)
    return r->err;
  return r->left != 0 ? KTP_ERR_TRAILING : KTP_OK;
}

/* ---- encoding ---- */

/* `pos` keeps counting past `cap` so the encoder can tell "the payload is over
 * KTP_MAX_PAYLOAD" (LENGTH, the message cannot be sent at all) from "the
 * caller's buffer is short" (SPACE, a bigger buffer would do). */
struct ktp_writer {
  uint8_t* buf;
  size_t cap;
  size_t pos;
  int err; /* BOUNDS from an oversized input, else KTP_OK */
};

static inline void ktp_put(struct ktp_writer* w, const void* data, size_t n) {
  if (n != 0 && w->pos <= w->cap && n <= w->cap - w->pos)
    memcpy(w->buf + w->pos, data, n);
  w->pos += n;
}
static inline void ktp_put_u8(struct ktp_writer* w, uint8_t v) { ktp_put(w, &v, 1); }
static inline void ktp_put_u16(struct ktp_writer* w, uint16_t v) {
  uint8_t b[2];
  ktp_put_le16(b, v);
  ktp_put(w, b, 2);
}
static inline void ktp_put_u32(struct ktp_writer* w, uint32_t v) {
  uint8_t b[4];
  ktp_put_le32(b, v);
  ktp_put(w, b, 4);
}
static inline void ktp_put_u64(struct ktp_writer* w, uint64_t v) {
  uint8_t b[8];
  ktp_put_le64(b, v);
  ktp_put(w, b, 8);
}
static inline void ktp_put_sized(struct ktp_writer* w, const void* data, uint16_t len, uint32_t limit) {
  if (len > limit) {
    w->err = KTP_ERR_BOUNDS;
    return;
  }
  ktp_put_u16(w, len);
  ktp_put(w, data, len);
}
static inline void ktp_put_str(struct ktp_writer* w, struct ktp_str s) {
  ktp_put_sized(w, s.data, s.len, KTP_MAX_STRING);
}

/* Reserves the header; ktp_writer_finish fills it once the length is known. */
struct ktp_writer ktp_writer_begin(uint8_t* buf, size_t cap);
/* Returns the frame size or a negative status (BOUNDS, LENGTH, SPACE). */
long ktp_writer_finish(struct ktp_writer* w, uint8_t type, uint64_t seq);

#endif
