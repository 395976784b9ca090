/* The bounded frame queue and the order frames leave in.
 *
 * Two lanes: the state dump of the current connection (never dropped; its
 * size is bounded by the kernel's own tables, so it is not charged to the
 * budget) and live events (charged; when the budget is full the oldest are
 * dropped and counted per type). Per connection the host gets, in order:
 * the whole dump (HELLO .. STATE_END), then LOST(QUEUE) frames for drops not
 * yet reported, then the live events (heartbeats among them, in order).
 *
 * Frames are queued already encoded, and their seq is rewritten as they
 * leave: a dump is built while live events keep arriving, and seq must count
 * frames in the order the host receives them.
 *
 * Frames leave in batches: as many whole frames as fit in one write of
 * KTG_WRITE_BYTES (virtio_console's largest) go out in one write(), since a
 * trace records every write's path through the guest kernel.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ktguest.h"

struct qframe {
  struct qframe *next;
  uint32_t len;
  uint8_t type;
  uint8_t data[];
};

struct fqueue {
  struct qframe *head, *tail;
  size_t bytes; /* frame bytes plus node overhead: what the budget sees */
};

static struct {
  struct fqueue dump, live, urgent;
  size_t budget;
  uint64_t dropped[KTP_TYPE_MAX + 1]; /* dropped and not yet reported */
  uint8_t cur[KTP_MAX_FRAME]; /* the next frame, loaded and stamped, not yet staged */
  size_t cur_len, cur_off;    /* cur_off is 0: cur_len > 0 means a frame waits */
  uint8_t cur_type;
  int cur_live;      /* a live event: a drop if the host leaves mid-frame */
  uint64_t cur_lost; /* a LOST(QUEUE) count to restore on such a drop */
  uint64_t seq;
  int hello_sent; /* the session's first frame (HELLO) went out */
} Q;

#define KTG_WRITE_BYTES (32u * 1024u)
#define KTG_STAGED_MAX 256

/* The bytes of the current write: whole frames, in order; `off` of them sent. */
static struct {
  uint8_t buf[KTP_MAX_FRAME + KTG_WRITE_BYTES];
  size_t len, off;
  struct staged {
    size_t end; /* offset just past the frame in buf */
    uint8_t type;
    int live;
    uint64_t lost;
  } frames[KTG_STAGED_MAX];
  int first, count; /* frames[first .. first+count) are not wholly sent */
} S;

static uint8_t scratch[KTP_MAX_FRAME];

uint8_t *ktg_scratch(void) { return scratch; }

static size_t cost(const struct qframe *f) { return sizeof *f + f->len; }

static void fq_push(struct fqueue *q, struct qframe *f) {
  f->next = NULL;
  if (q->tail) q->tail->next = f;
  else q->head = f;
  q->tail = f;
  q->bytes += cost(f);
}

static struct qframe *fq_pop(struct fqueue *q) {
  struct qframe *f = q->head;
  if (!f) return NULL;
  q->head = f->next;
  if (!q->head) q->tail = NULL;
  q->bytes -= cost(f);
  return f;
}

static void fq_clear(struct fqueue *q) {
  struct qframe *f;
  while ((f = fq_pop(q)) != NULL) free(f);
}

static void count_drop(uint8_t type) {
  if (type <= KTP_TYPE_MAX) Q.dropped[type]++;
  g_ctr.queue_dropped++;
}

void ktg_queue_init(size_t live_budget) { Q.budget = live_budget; }

void ktg_enqueue(enum ktg_lane lane, long n) {
  if (n < 0) {
    g_ctr.encode_errors++;
    ktg_log("encode failed: %s", ktp_status_name((int)n));
    return;
  }
  uint8_t type = scratch[5];
  struct qframe *f = malloc(sizeof *f + (size_t)n);
  if (!f) {
    if (lane == KTG_LANE_LIVE) count_drop(type);
    else ktg_log("out of memory for a state dump frame");
    return;
  }
  f->len = (uint32_t)n;
  f->type = type;
  memcpy(f->data, scratch, (size_t)n);
  if (lane == KTG_LANE_DUMP) {
    fq_push(&Q.dump, f);
    return;
  }
  if (lane == KTG_LANE_URGENT) {
    fq_push(&Q.urgent, f);
    return;
  }
  while (Q.live.head && Q.live.bytes + cost(f) > Q.budget) {
    struct qframe *old = fq_pop(&Q.live);
    count_drop(old->type);
    free(old);
  }
  if (cost(f) > Q.budget) {
    count_drop(type);
    free(f);
    return;
  }
  fq_push(&Q.live, f);
}

void ktg_held_add(struct ktg_held_list *l, long n) {
  if (n < 0) {
    g_ctr.encode_errors++;
    ktg_log("encode of a held frame failed: %s", ktp_status_name((int)n));
    return;
  }
  if (l->count == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 128;
    struct ktg_held *f = realloc(l->frames, cap * sizeof *f);
    if (!f) return;
    l->frames = f;
    l->cap = cap;
  }
  uint8_t *copy = malloc((size_t)n);
  if (!copy) return;
  memcpy(copy, scratch, (size_t)n);
  l->frames[l->count].data = copy;
  l->frames[l->count].len = (uint32_t)n;
  l->count++;
}

void ktg_held_enqueue(const struct ktg_held_list *l, enum ktg_lane lane) {
  for (size_t i = 0; i < l->count; ++i) {
    memcpy(scratch, l->frames[i].data, l->frames[i].len);
    ktg_enqueue(lane, (long)l->frames[i].len);
  }
}

void ktg_held_clear(struct ktg_held_list *l) {
  for (size_t i = 0; i < l->count; ++i) free(l->frames[i].data);
  l->count = 0;
}

void ktg_held_free(struct ktg_held_list *l) {
  ktg_held_clear(l);
  free(l->frames);
  l->frames = NULL;
  l->cap = 0;
}

static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

/* The CRC covers the header with a zero crc field, so a streaming CRC over
 * the zeroed frame is the same value the codec computes. */
static void restamp(uint8_t *frame, size_t len, uint64_t seq) {
  for (int i = 0; i < 8; ++i) frame[16 + i] = (uint8_t)(seq >> (8 * i));
  put_le32(frame + 12, 0);
  put_le32(frame + 12, ktp_crc32c(0, frame, len));
}

int ktg_queue_selftest(void) {
  static uint8_t a[256], b[256];
  struct ktp_heartbeat hb = {123, 4, 5, 6, 7, 8};
  long na = ktp_encode_heartbeat(a, sizeof a, 0x1122334455667788ull, &hb);
  long nb = ktp_encode_heartbeat(b, sizeof b, 0, &hb);
  if (na <= 0 || na != nb) return -1;
  restamp(b, (size_t)nb, 0x1122334455667788ull);
  return memcmp(a, b, (size_t)na) == 0 ? 0 : -1;
}

void ktg_queue_new_session(void) {
  Q.seq = 0;
  Q.cur_len = Q.cur_off = 0;
  S.len = S.off = 0;
  S.first = S.count = 0;
  fq_clear(&Q.dump);
  fq_clear(&Q.urgent);
  Q.hello_sent = 0;
}

static void drop_unsent(uint8_t type, int live, uint64_t lost) {
  if (lost) Q.dropped[type] += lost;
  else if (live) count_drop(type);
}

void ktg_queue_disconnect(void) {
  for (int i = 0; i < S.count; ++i) {
    const struct staged *f = &S.frames[S.first + i];
    drop_unsent(f->type, f->live, f->lost);
  }
  S.len = S.off = 0;
  S.first = S.count = 0;
  if (Q.cur_len) drop_unsent(Q.cur_type, Q.cur_live, Q.cur_lost);
  Q.cur_len = Q.cur_off = 0;
  fq_clear(&Q.dump);
  fq_clear(&Q.urgent); /* their holds end when the guard device closes */
}

/* The heartbeat goes into the live lane, in order with the events: its
 * counters then say exactly how many records were read before it, so the
 * host can check between any two heartbeats that nothing went missing. */
void ktg_queue_heartbeat_due(void) {
  struct ktp_heartbeat m = {ktg_perf_now(), g_ctr.frames_sent, g_ctr.perf_records, g_ctr.text_pokes,
                            g_ctr.lost_records, g_ctr.queue_dropped};
  ktg_enqueue(KTG_LANE_LIVE, ktp_encode_heartbeat(ktg_scratch(), KTP_MAX_FRAME, 0, &m));
}

size_t ktg_queue_live_bytes(void) { return Q.live.bytes; }

static int any_dropped(void) {
  for (int t = 0; t <= (int)KTP_TYPE_MAX; ++t)
    if (Q.dropped[t]) return 1;
  return 0;
}

int ktg_queue_pending(void) {
  return S.off < S.len || Q.cur_len || Q.dump.head || Q.urgent.head || any_dropped() || Q.live.head;
}

static void take(struct qframe *f, int live) {
  memcpy(Q.cur, f->data, f->len);
  Q.cur_len = f->len;
  Q.cur_type = f->type;
  Q.cur_live = live;
  free(f);
}

/* Loads the next frame into cur; returns 0 when there is none to send. */
static int next_frame(int dump_complete) {
  long n = 0;
  Q.cur_off = Q.cur_len = 0;
  Q.cur_lost = 0;
  Q.cur_live = 0;
  if (Q.urgent.head && Q.hello_sent) {
    /* A guard notice: a kernel context waits for its ack. Only HELLO goes
     * before it, so that the host knows the session. */
    take(fq_pop(&Q.urgent), 0);
  } else if (Q.dump.head || !dump_complete) {
    /* Nothing overtakes the dump: the host needs the state before events. */
    if (!Q.dump.head || (!dump_complete && Q.hello_sent)) return 0;
    /* HELLO leaves as soon as it is queued; the rest of the dump once whole. */
    take(fq_pop(&Q.dump), 0);
    Q.hello_sent = 1;
  } else if (any_dropped()) {
    int t = 0;
    while (!Q.dropped[t]) ++t;
    struct ktp_lost m = {ktg_perf_now(), UINT32_MAX, KTP_LOST_QUEUE, (uint32_t)t, Q.dropped[t]};
    n = ktp_encode_lost(Q.cur, sizeof Q.cur, 0, &m);
    if (n > 0) {
      Q.cur_lost = Q.dropped[t];
      Q.cur_type = (uint8_t)t;
    }
    Q.dropped[t] = 0;
  } else if (Q.live.head) {
    take(fq_pop(&Q.live), 1);
  } else {
    return 0;
  }
  if (n < 0) {
    g_ctr.encode_errors++;
    ktg_log("encode failed: %s", ktp_status_name((int)n));
    return next_frame(dump_complete);
  }
  if (n > 0) Q.cur_len = (size_t)n;
  restamp(Q.cur, Q.cur_len, Q.seq++);
  return 1;
}

/* Fills S with the waiting frame and those after it, as long as they fit in
 * one write (a larger frame goes alone); returns 0 when there is none. */
static int stage(int dump_complete) {
  S.len = S.off = 0;
  S.first = S.count = 0;
  while (S.count < KTG_STAGED_MAX) {
    if (!Q.cur_len && !next_frame(dump_complete)) break;
    if (S.len && S.len + Q.cur_len > KTG_WRITE_BYTES) break;
    memcpy(S.buf + S.len, Q.cur, Q.cur_len);
    S.len += Q.cur_len;
    S.frames[S.count++] = (struct staged){S.len, Q.cur_type, Q.cur_live, Q.cur_lost};
    Q.cur_len = 0;
  }
  return S.len > 0;
}

int ktg_queue_flush(int fd, int dump_complete) {
  /* Bounded per call so the perf rings are drained between slices. */
  size_t budget = 1u << 20;
  while (budget > 0) {
    if (S.off == S.len && !stage(dump_complete)) return 0;
    ssize_t w = write(fd, S.buf + S.off, S.len - S.off);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1;
    }
    if (w == 0) return 0;
    S.off += (size_t)w;
    g_ctr.bytes_sent += (uint64_t)w;
    g_ctr.writes++;
    budget = (size_t)w >= budget ? 0 : budget - (size_t)w;
    while (S.count && S.frames[S.first].end <= S.off) {
      g_ctr.frames_sent++;
      S.first++;
      S.count--;
    }
  }
  return 0;
}
