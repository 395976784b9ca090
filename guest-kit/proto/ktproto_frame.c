/* Framing: CRC-32C, frame header decode/encode, resynchronisation. */
#include "ktproto_crc_tables.h"
#include "ktproto_internal.h"

static const uint8_t ktp_magic_bytes[4] = {'K', 'T', 'S', 'B'};

const char* ktp_status_name(int status) {
  switch (status) {
    case KTP_OK: return "ok";
    case KTP_NEED_MORE: return "incomplete frame, more bytes needed";
    case KTP_ERR_MAGIC: return "no frame magic (\"KTSB\") at this position";
    case KTP_ERR_VERSION: return "frame of another protocol version";
    case KTP_ERR_LENGTH: return "payload length over the protocol maximum";
    case KTP_ERR_CRC: return "frame checksum (CRC-32C) mismatch";
    case KTP_ERR_TYPE: return "unknown or unexpected message type";
    case KTP_ERR_TRUNCATED: return "payload shorter than its fields";
    case KTP_ERR_TRAILING: return "unexpected bytes after the payload's fields";
    case KTP_ERR_BOUNDS: return "count or length in the payload over its limit";
    case KTP_ERR_SPACE: return "output buffer too small for the frame";
    default: return "unknown ktproto status";
  }
}

uint32_t ktp_crc32c(uint32_t crc, const void* data, size_t len) {
  const uint8_t* p = (const uint8_t*)data;
  uint32_t c = ~crc;
  /* Slicing-by-8: eight table lookups per 8 bytes instead of one per byte,
   * which is most of the decode cost for small frames. */
  while (len >= 8) {
    uint32_t lo = c ^ ktp_le32(p);
    uint32_t hi = ktp_le32(p + 4);
    c = ktp_crc_table[7][lo & 0xff] ^ ktp_crc_table[6][(lo >> 8) & 0xff] ^
        ktp_crc_table[5][(lo >> 16) & 0xff] ^ ktp_crc_table[4][lo >> 24] ^
        ktp_crc_table[3][hi & 0xff] ^ ktp_crc_table[2][(hi >> 8) & 0xff] ^
        ktp_crc_table[1][(hi >> 16) & 0xff] ^ ktp_crc_table[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--)
    c = ktp_crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

/* The checksum covers the header with its crc field as zero, so a receiver
 * can verify without copying the header. */
static uint32_t ktp_frame_crc(const uint8_t* frame, size_t payload_len) {
  static const uint8_t zero[4] = {0, 0, 0, 0};
  uint32_t crc = ktp_crc32c(0, frame, 12);
  crc = ktp_crc32c(crc, zero, 4);
  return ktp_crc32c(crc, frame + 16, 8 + payload_len);
}

int ktp_decode_frame(const uint8_t* buf, size_t len, struct ktp_frame* frame, size_t* consumed) {
  size_t i, have = len < 4 ? len : 4;
  uint32_t length;
  uint8_t type;

  *consumed = 0;
  /* A mismatch in a partial magic is reported at once: waiting for more bytes
   * would stall resynchronisation on a stream that ends mid-garbage. */
  for (i = 0; i < have; i++) {
    if (buf[i] != ktp_magic_bytes[i]) {
      *consumed = 1;
      return KTP_ERR_MAGIC;
    }
  }
  if (len < 5)
    return KTP_NEED_MORE;
  /* Before anything else: another version may lay out the rest differently. */
  if (buf[4] != KTP_VERSION) {
    *consumed = 1;
    return KTP_ERR_VERSION;
  }
  if (len < 12)
    return KTP_NEED_MORE;
  length = ktp_le32(buf + 8);
  if (length > KTP_MAX_PAYLOAD) {
    *consumed = 1;
    return KTP_ERR_LENGTH;
  }
  if (len < KTP_HEADER_SIZE + (size_t)length)
    return KTP_NEED_MORE;
  /* A bad CRC means the length may be the corrupt field, so skipping the
   * claimed frame could swallow good frames: skip one byte and rescan. */
  if (ktp_frame_crc(buf, length) != ktp_le32(buf + 12)) {
    *consumed = 1;
    return KTP_ERR_CRC;
  }
  /* The CRC vouches for the length, so an unknown type (say, from a newer
   * minor version) can be skipped whole. */
  type = buf[5];
  if (type == 0 || type > KTP_TYPE_MAX) {
    *consumed = KTP_HEADER_SIZE + (size_t)length;
    return KTP_ERR_TYPE;
  }
  frame->type = type;
  frame->seq = ktp_le64(buf + 16);
  frame->payload = buf + KTP_HEADER_SIZE;
  frame->length = length;
  *consumed = KTP_HEADER_SIZE + (size_t)length;
  return KTP_OK;
}

size_t ktp_find_magic(const uint8_t* buf, size_t len) {
  size_t i, j;
  for (i = 0; i < len; i++) {
    size_t have;
    if (buf[i] != ktp_magic_bytes[0])
      continue;
    have = len - i < 4 ? len - i : 4;
    for (j = 1; j < have && buf[i + j] == ktp_magic_bytes[j]; j++)
      ;
    if (j == have)
      return i;
  }
  return len;
}

struct ktp_writer ktp_writer_begin(uint8_t* buf, size_t cap) {
  struct ktp_writer w;
  w.buf = buf;
  w.cap = cap;
  w.pos = KTP_HEADER_SIZE;
  w.err = KTP_OK;
  return w;
}

long ktp_writer_finish(struct ktp_writer* w, uint8_t type, uint64_t seq) {
  size_t payload = w->pos - KTP_HEADER_SIZE;
  uint8_t* h = w->buf;
  if (w->err != KTP_OK)
    return w->err;
  if (payload > KTP_MAX_PAYLOAD)
    return KTP_ERR_LENGTH;
  if (w->pos > w->cap)
    return KTP_ERR_SPACE;
  memcpy(h, ktp_magic_bytes, 4);
  h[4] = (uint8_t)KTP_VERSION;
  h[5] = type;
  ktp_put_le16(h + 6, 0);
  ktp_put_le32(h + 8, (uint32_t)payload);
  ktp_put_le64(h + 16, seq);
  ktp_put_le32(h + 12, ktp_frame_crc(h, payload));
  return (long)w->pos;
}
