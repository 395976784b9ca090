/* Parsers and encoders of every message, expanded from ktproto_schema.h: each
 * kind of field has one reader and one writer here, and each payload is the
 * list of its fields. Parsers fill a copy and write *out only on KTP_OK, so a
 * caller never sees a half-parsed message. */
#include "ktproto_internal.h"

/* ---- arrays ---- */

static void get_record_symbol(struct ktp_reader* r, struct ktp_symbol* m);
static void put_record_symbol(struct ktp_writer* w, const struct ktp_symbol* m);
static void views_record_symbol(const struct ktp_symbol* m, ktp_view_fn fn, void* ctx);
static void views_record_clock(const struct ktp_clock* m, ktp_view_fn fn, void* ctx);

/* Stops at the first error, so a huge count in a short payload costs no more
 * than the payload's size. */
static void get_symbols(struct ktp_reader* r, uint32_t* count, struct ktp_symbol* out, uint32_t limit) {
  uint32_t i, n = ktp_get_u32(r);
  if (r->err == KTP_OK && n > limit)
    r->err = KTP_ERR_BOUNDS;
  for (i = 0; i < n && r->err == KTP_OK; i++)
    get_record_symbol(r, &out[i]);
  *count = n;
}

static void get_u32s(struct ktp_reader* r, uint32_t* count, uint32_t* out, uint32_t limit) {
  uint32_t i, n = ktp_get_u32(r);
  if (r->err == KTP_OK && n > limit)
    r->err = KTP_ERR_BOUNDS;
  /* The exact size is known up front: check it before touching out. */
  if (r->err == KTP_OK && (uint64_t)n * 4 > r->left)
    r->err = KTP_ERR_TRUNCATED;
  for (i = 0; i < n && r->err == KTP_OK; i++)
    out[i] = ktp_get_u32(r);
  *count = n;
}

static void put_symbols(struct ktp_writer* w, uint32_t count, const struct ktp_symbol* in, uint32_t limit) {
  uint32_t i;
  if (count > limit) {
    w->err = KTP_ERR_BOUNDS;
    return;
  }
  ktp_put_u32(w, count);
  for (i = 0; i < count && w->err == KTP_OK; i++)
    put_record_symbol(w, &in[i]);
}

static void put_u32s(struct ktp_writer* w, uint32_t count, const uint32_t* in, uint32_t limit) {
  uint32_t i;
  if (count > limit) {
    w->err = KTP_ERR_BOUNDS;
    return;
  }
  ktp_put_u32(w, count);
  for (i = 0; i < count; i++)
    ktp_put_u32(w, in[i]);
}

/* ---- one reader and one writer per kind of field ---- */

#define GET_U8(n, a) m->n = ktp_get_u8(r);
#define GET_U16(n, a) m->n = ktp_get_u16(r);
#define GET_U32(n, a) m->n = ktp_get_u32(r);
#define GET_U64(n, a) m->n = ktp_get_u64(r);
#define GET_STR(n, a) m->n = ktp_get_str(r);
#define GET_TAG(n, a) ktp_get_bytes(r, m->n, sizeof m->n);
#define GET_BLOB(n, a) m->n##_bytes = ktp_get_sized(r, KTP_MAX_BLOB, &m->n##_len);
#define GET_CLOCK(n, a) get_record_clock(r, &m->n);
#define GET_SYMBOLS(n, a) get_symbols(r, &m->count, m->n, a);
#define GET_U32S(n, a) get_u32s(r, &m->count, m->n, a);
#define GET_FIELD(kind, n, a) GET_##kind(n, a)

#define PUT_U8(n, a) ktp_put_u8(w, m->n);
#define PUT_U16(n, a) ktp_put_u16(w, m->n);
#define PUT_U32(n, a) ktp_put_u32(w, m->n);
#define PUT_U64(n, a) ktp_put_u64(w, m->n);
#define PUT_STR(n, a) ktp_put_str(w, m->n);
#define PUT_TAG(n, a) ktp_put(w, m->n, sizeof m->n);
#define PUT_BLOB(n, a) ktp_put_sized(w, m->n##_bytes, m->n##_len, KTP_MAX_BLOB);
#define PUT_CLOCK(n, a) put_record_clock(w, &m->n);
#define PUT_SYMBOLS(n, a) put_symbols(w, m->count, m->n, a);
#define PUT_U32S(n, a) put_u32s(w, m->count, m->n, a);
#define PUT_FIELD(kind, n, a) PUT_##kind(n, a)

/* Byte ranges a parsed field points to. */
#define VIEW_U8(n, a)
#define VIEW_U16(n, a)
#define VIEW_U32(n, a)
#define VIEW_U64(n, a)
#define VIEW_TAG(n, a)
#define VIEW_STR(n, a) fn(ctx, m->n.data, m->n.len);
#define VIEW_BLOB(n, a) fn(ctx, m->n##_bytes, m->n##_len);
#define VIEW_CLOCK(n, a) views_record_clock(&m->n, fn, ctx);
#define VIEW_SYMBOLS(n, a)                  \
  {                                         \
    uint32_t i;                             \
    for (i = 0; i < m->count; i++)          \
      views_record_symbol(&m->n[i], fn, ctx); \
  }
#define VIEW_U32S(n, a)
#define VIEW_FIELD(kind, n, a) VIEW_##kind(n, a)

/* Points a payload's array at the caller's storage. */
#define BIND_U8(n, a)
#define BIND_U16(n, a)
#define BIND_U32(n, a)
#define BIND_U64(n, a)
#define BIND_STR(n, a)
#define BIND_TAG(n, a)
#define BIND_BLOB(n, a)
#define BIND_CLOCK(n, a)
#define BIND_SYMBOLS(n, a) m->n = s->n;
#define BIND_U32S(n, a) m->n = s->n;
#define BIND_FIELD(kind, n, a) BIND_##kind(n, a)

/* ---- records ---- */

#define DEFINE_RECORD(rec)                                                                         \
  static void get_record_##rec(struct ktp_reader* r, struct ktp_##rec* m) {                        \
    KTP_RECORD_##rec(GET_FIELD)                                                                    \
  }                                                                                                \
  static void put_record_##rec(struct ktp_writer* w, const struct ktp_##rec* m) {                  \
    KTP_RECORD_##rec(PUT_FIELD)                                                                    \
  }                                                                                                \
  static void views_record_##rec(const struct ktp_##rec* m, ktp_view_fn fn, void* ctx) {           \
    (void)m, (void)fn, (void)ctx;                                                                  \
    KTP_RECORD_##rec(VIEW_FIELD)                                                                   \
  }
KTP_RECORDS(DEFINE_RECORD)

/* ---- payloads ---- */

#define DEFINE_PAYLOAD(p)                                                                          \
  static int parse_payload_##p(const struct ktp_frame* f, struct ktp_##p* out) {                   \
    struct ktp_reader reader = ktp_reader_of(f), *r = &reader;                                     \
    struct ktp_##p copy = *out, *m = &copy; /* keeps the caller's array pointers */                \
    int st;                                                                                        \
    KTP_PAYLOAD_##p(GET_FIELD)                                                                     \
    if ((st = ktp_reader_finish(r)) == KTP_OK)                                                     \
      *out = copy;                                                                                 \
    return st;                                                                                     \
  }                                                                                                \
  static long encode_payload_##p(uint8_t* buf, size_t cap, uint64_t seq, uint8_t type,             \
                                 const struct ktp_##p* m) {                                        \
    struct ktp_writer writer = ktp_writer_begin(buf, cap), *w = &writer;                           \
    KTP_PAYLOAD_##p(PUT_FIELD)                                                                     \
    return ktp_writer_finish(w, type, seq);                                                        \
  }                                                                                                \
  static void views_payload_##p(const struct ktp_##p* m, ktp_view_fn fn, void* ctx) {              \
    (void)m, (void)fn, (void)ctx;                                                                  \
    KTP_PAYLOAD_##p(VIEW_FIELD)                                                                    \
  }                                                                                                \
  static void bind_payload_##p(struct ktp_##p* m, struct ktp_message_storage* s) {                 \
    (void)m, (void)s;                                                                              \
    KTP_PAYLOAD_##p(BIND_FIELD)                                                                    \
  }
KTP_PAYLOADS(DEFINE_PAYLOAD)

/* ---- messages ---- */

#define DEFINE_MESSAGE(NAME, num, fn, p, sender)                                          \
  int ktp_parse_##fn(const struct ktp_frame* f, struct ktp_##p* out) {                    \
    if (f->type != KTP_##NAME)                                                            \
      return KTP_ERR_TYPE;                                                                \
    return parse_payload_##p(f, out);                                                     \
  }                                                                                       \
  long ktp_encode_##fn(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_##p* m) { \
    return encode_payload_##p(buf, cap, seq, KTP_##NAME, m);                              \
  }
KTP_MESSAGES(DEFINE_MESSAGE)

int ktp_parse_message(const struct ktp_frame* f, struct ktp_message* out, struct ktp_message_storage* storage) {
  int st;
  switch (f->type) {
#define PARSE_CASE(NAME, num, fn, p, sender)     \
  case KTP_##NAME:                               \
    bind_payload_##p(&out->u.p, storage);        \
    st = parse_payload_##p(f, &out->u.p);        \
    break;
    KTP_MESSAGES(PARSE_CASE)
    default:
      return KTP_ERR_TYPE;
  }
  if (st == KTP_OK)
    out->type = f->type;
  return st;
}

long ktp_encode_message(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_message* m) {
  switch (m->type) {
#define ENCODE_CASE(NAME, num, fn, p, sender) \
  case KTP_##NAME:                            \
    return encode_payload_##p(buf, cap, seq, KTP_##NAME, &m->u.p);
    KTP_MESSAGES(ENCODE_CASE)
    default:
      return KTP_ERR_TYPE;
  }
}

void ktp_message_views(const struct ktp_message* m, ktp_view_fn fn, void* ctx) {
  switch (m->type) {
#define VIEWS_CASE(NAME, num, fn_name, p, sender) \
  case KTP_##NAME:                                \
    views_payload_##p(&m->u.p, fn, ctx);          \
    return;
    KTP_MESSAGES(VIEWS_CASE)
    default:
      return;
  }
}

const char* ktp_type_name(unsigned type) {
  switch (type) {
#define NAME_CASE(NAME, num, fn, p, sender) \
  case KTP_##NAME:                          \
    return #NAME;
    KTP_MESSAGES(NAME_CASE)
    default:
      return NULL;
  }
}

int ktp_type_sender(unsigned type) {
  switch (type) {
#define SENDER_CASE(NAME, num, fn, p, sender) \
  case KTP_##NAME:                            \
    return KTP_SENDER_##sender;
    KTP_MESSAGES(SENDER_CASE)
    default:
      return 0;
  }
}
