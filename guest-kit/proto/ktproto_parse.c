/* Payload parsers. Field order is the order of PROTOCOL.md's tables. Each
 * parser fills a local copy and writes *out only on KTP_OK, so a caller never
 * sees a half-parsed message. */
#include "ktproto_internal.h"

static void ktp_get_clock(struct ktp_reader* r, struct ktp_clock* c) {
  c->time_zero = ktp_get_u64(r);
  c->time_mult = ktp_get_u32(r);
  c->time_shift = ktp_get_u16(r);
  c->cap_user_time_zero = ktp_get_u8(r);
}

int ktp_parse_hello(const struct ktp_frame* f, struct ktp_hello* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_hello m;
  int st;
  if (f->type != KTP_HELLO)
    return KTP_ERR_TYPE;
  m.proto_minor = ktp_get_u16(&r);
  m.cpu_count = ktp_get_u32(&r);
  m.boot_time_ns = ktp_get_u64(&r);
  m.session = ktp_get_u64(&r);
  ktp_get_clock(&r, &m.clock);
  m.release = ktp_get_str(&r);
  m.build_id = ktp_get_str(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

static int parse_ack_payload(const struct ktp_frame* f, struct ktp_hello_ack* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_hello_ack m;
  int st;
  m.proto_minor = ktp_get_u16(&r);
  m.flags = ktp_get_u32(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_hello_ack(const struct ktp_frame* f, struct ktp_hello_ack* out) {
  if (f->type != KTP_HELLO_ACK) return KTP_ERR_TYPE;
  return parse_ack_payload(f, out);
}

int ktp_parse_host_hello(const struct ktp_frame* f, struct ktp_hello_ack* out) {
  if (f->type != KTP_HOST_HELLO) return KTP_ERR_TYPE;
  return parse_ack_payload(f, out);
}

int ktp_parse_state_begin(const struct ktp_frame* f, struct ktp_state_begin* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_state_begin m;
  int st;
  if (f->type != KTP_STATE_BEGIN)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.reason = ktp_get_u32(&r);
  m.symbols = ktp_get_u32(&r);
  m.modules = ktp_get_u32(&r);
  m.bpf_progs = ktp_get_u32(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_state_symbols(const struct ktp_frame* f, struct ktp_state_symbols* out) {
  struct ktp_reader r = ktp_reader_of(f);
  uint32_t i, count;
  int st;
  if (f->type != KTP_STATE_SYMBOLS)
    return KTP_ERR_TYPE;
  count = ktp_get_u32(&r);
  if (r.err == KTP_OK && count > KTP_MAX_BATCH)
    return KTP_ERR_BOUNDS;
  /* Stops at the first error, so a huge count in a short payload costs no
   * more than the payload's size. */
  for (i = 0; i < count && r.err == KTP_OK; i++) {
    struct ktp_symbol* s = &out->symbols[i];
    s->addr = ktp_get_u64(&r);
    s->type = ktp_get_u8(&r);
    s->name = ktp_get_str(&r);
    s->module = ktp_get_str(&r);
  }
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    out->count = count;
  return st;
}

int ktp_parse_module(const struct ktp_frame* f, struct ktp_module* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_module m;
  int st;
  if (f->type != KTP_STATE_MODULE && f->type != KTP_MODULE_LOAD && f->type != KTP_MODULE_UNLOAD)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.name = ktp_get_str(&r);
  m.text_addr = ktp_get_u64(&r);
  m.text_size = ktp_get_u64(&r);
  m.core_addr = ktp_get_u64(&r);
  m.core_size = ktp_get_u64(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_bpf_prog(const struct ktp_frame* f, struct ktp_bpf_prog* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_bpf_prog m;
  int st;
  if (f->type != KTP_STATE_BPF)
    return KTP_ERR_TYPE;
  m.id = ktp_get_u32(&r);
  m.prog_type = ktp_get_u32(&r);
  ktp_get_bytes(&r, m.tag, sizeof m.tag);
  m.name = ktp_get_str(&r);
  m.jited_addr = ktp_get_u64(&r);
  m.jited_len = ktp_get_u32(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_cpus(const struct ktp_frame* f, struct ktp_cpus* out) {
  struct ktp_reader r = ktp_reader_of(f);
  uint32_t i, count;
  int st;
  if (f->type != KTP_STATE_CPUS)
    return KTP_ERR_TYPE;
  count = ktp_get_u32(&r);
  if (r.err == KTP_OK && count > KTP_MAX_CPUS)
    return KTP_ERR_BOUNDS;
  /* The exact size is known up front: check it before touching out->cpus. */
  if (r.err == KTP_OK && (uint64_t)count * 4 > r.left)
    return KTP_ERR_TRUNCATED;
  for (i = 0; i < count && r.err == KTP_OK; i++)
    out->cpus[i] = ktp_get_u32(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    out->count = count;
  return st;
}

int ktp_parse_state_end(const struct ktp_frame* f, uint64_t* time) {
  struct ktp_reader r = ktp_reader_of(f);
  uint64_t t;
  int st;
  if (f->type != KTP_STATE_END)
    return KTP_ERR_TYPE;
  t = ktp_get_u64(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *time = t;
  return st;
}

int ktp_parse_ksymbol(const struct ktp_frame* f, struct ktp_ksymbol* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_ksymbol m;
  int st;
  if (f->type != KTP_KSYMBOL)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.cpu = ktp_get_u32(&r);
  m.addr = ktp_get_u64(&r);
  m.len = ktp_get_u32(&r);
  m.ksym_type = ktp_get_u16(&r);
  m.flags = ktp_get_u16(&r);
  m.name = ktp_get_str(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_bpf_event(const struct ktp_frame* f, struct ktp_bpf_event* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_bpf_event m;
  int st;
  if (f->type != KTP_BPF_EVENT)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.cpu = ktp_get_u32(&r);
  m.type = ktp_get_u16(&r);
  m.flags = ktp_get_u16(&r);
  m.id = ktp_get_u32(&r);
  ktp_get_bytes(&r, m.tag, sizeof m.tag);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_text_poke(const struct ktp_frame* f, struct ktp_text_poke* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_text_poke m;
  int st;
  if (f->type != KTP_TEXT_POKE)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.cpu = ktp_get_u32(&r);
  m.addr = ktp_get_u64(&r);
  m.old_bytes = ktp_get_sized(&r, KTP_MAX_BLOB, &m.old_len);
  m.new_bytes = ktp_get_sized(&r, KTP_MAX_BLOB, &m.new_len);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_lost(const struct ktp_frame* f, struct ktp_lost* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_lost m;
  int st;
  if (f->type != KTP_LOST)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.cpu = ktp_get_u32(&r);
  m.kind = ktp_get_u32(&r);
  m.record_type = ktp_get_u32(&r);
  m.count = ktp_get_u64(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_guard_notice(const struct ktp_frame* f, struct ktp_guard_notice* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_guard_notice m;
  int st;
  if (f->type != KTP_GUARD_NOTICE)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.cpu = ktp_get_u32(&r);
  m.id = ktp_get_u64(&r);
  m.start = ktp_get_u64(&r);
  m.end = ktp_get_u64(&r);
  m.kind = ktp_get_u32(&r);
  m.ack_addr = ktp_get_u64(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_guard_ack(const struct ktp_frame* f, struct ktp_guard_ack* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_guard_ack m;
  int st;
  if (f->type != KTP_GUARD_ACK)
    return KTP_ERR_TYPE;
  m.id = ktp_get_u64(&r);
  m.status = ktp_get_u32(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_heartbeat(const struct ktp_frame* f, struct ktp_heartbeat* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_heartbeat m;
  int st;
  if (f->type != KTP_HEARTBEAT)
    return KTP_ERR_TYPE;
  m.time = ktp_get_u64(&r);
  m.frames_sent = ktp_get_u64(&r);
  m.perf_records = ktp_get_u64(&r);
  m.text_pokes = ktp_get_u64(&r);
  m.lost_records = ktp_get_u64(&r);
  m.queue_dropped = ktp_get_u64(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}

int ktp_parse_clock(const struct ktp_frame* f, uint64_t* time, struct ktp_clock* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_clock c;
  uint64_t t;
  int st;
  if (f->type != KTP_CLOCK)
    return KTP_ERR_TYPE;
  t = ktp_get_u64(&r);
  ktp_get_clock(&r, &c);
  if ((st = ktp_reader_finish(&r)) == KTP_OK) {
    *time = t;
    *out = c;
  }
  return st;
}

int ktp_parse_error(const struct ktp_frame* f, struct ktp_error* out) {
  struct ktp_reader r = ktp_reader_of(f);
  struct ktp_error m;
  int st;
  if (f->type != KTP_ERROR)
    return KTP_ERR_TYPE;
  m.message = ktp_get_str(&r);
  if ((st = ktp_reader_finish(&r)) == KTP_OK)
    *out = m;
  return st;
}
