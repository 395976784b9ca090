/* Encoders: the mirror of ktproto_parse.c, field for field. */
#include "ktproto_internal.h"

static void ktp_put_clock(struct ktp_writer* w, const struct ktp_clock* c) {
  ktp_put_u64(w, c->time_zero);
  ktp_put_u32(w, c->time_mult);
  ktp_put_u16(w, c->time_shift);
  ktp_put_u8(w, c->cap_user_time_zero);
}

long ktp_encode_hello(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_hello* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u16(&w, m->proto_minor);
  ktp_put_u32(&w, m->cpu_count);
  ktp_put_u64(&w, m->boot_time_ns);
  ktp_put_u64(&w, m->session);
  ktp_put_clock(&w, &m->clock);
  ktp_put_str(&w, m->release);
  ktp_put_str(&w, m->build_id);
  return ktp_writer_finish(&w, KTP_HELLO, seq);
}

long ktp_encode_hello_ack(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_hello_ack* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u16(&w, m->proto_minor);
  ktp_put_u32(&w, m->flags);
  return ktp_writer_finish(&w, KTP_HELLO_ACK, seq);
}

long ktp_encode_host_hello(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_hello_ack* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u16(&w, m->proto_minor);
  ktp_put_u32(&w, m->flags);
  return ktp_writer_finish(&w, KTP_HOST_HELLO, seq);
}

long ktp_encode_state_begin(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_state_begin* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->time);
  ktp_put_u32(&w, m->reason);
  ktp_put_u32(&w, m->symbols);
  ktp_put_u32(&w, m->modules);
  ktp_put_u32(&w, m->bpf_progs);
  return ktp_writer_finish(&w, KTP_STATE_BEGIN, seq);
}

long ktp_encode_state_symbols(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_state_symbols* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  uint32_t i;
  if (m->count > KTP_MAX_BATCH)
    return KTP_ERR_BOUNDS;
  ktp_put_u32(&w, m->count);
  for (i = 0; i < m->count && w.err == KTP_OK; i++) {
    const struct ktp_symbol* s = &m->symbols[i];
    ktp_put_u64(&w, s->addr);
    ktp_put_u8(&w, s->type);
    ktp_put_str(&w, s->name);
    ktp_put_str(&w, s->module);
  }
  return ktp_writer_finish(&w, KTP_STATE_SYMBOLS, seq);
}

long ktp_encode_module(uint8_t* buf, size_t cap, uint64_t seq, uint8_t type, const struct ktp_module* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  if (type != KTP_STATE_MODULE && type != KTP_MODULE_LOAD && type != KTP_MODULE_UNLOAD)
    return KTP_ERR_TYPE;
  ktp_put_u64(&w, m->time);
  ktp_put_str(&w, m->name);
  ktp_put_u64(&w, m->text_addr);
  ktp_put_u64(&w, m->text_size);
  ktp_put_u64(&w, m->core_addr);
  ktp_put_u64(&w, m->core_size);
  return ktp_writer_finish(&w, type, seq);
}

long ktp_encode_bpf_prog(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_bpf_prog* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u32(&w, m->id);
  ktp_put_u32(&w, m->prog_type);
  ktp_put(&w, m->tag, sizeof m->tag);
  ktp_put_str(&w, m->name);
  ktp_put_u64(&w, m->jited_addr);
  ktp_put_u32(&w, m->jited_len);
  return ktp_writer_finish(&w, KTP_STATE_BPF, seq);
}

long ktp_encode_cpus(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_cpus* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  uint32_t i;
  if (m->count > KTP_MAX_CPUS)
    return KTP_ERR_BOUNDS;
  ktp_put_u32(&w, m->count);
  for (i = 0; i < m->count; i++)
    ktp_put_u32(&w, m->cpus[i]);
  return ktp_writer_finish(&w, KTP_STATE_CPUS, seq);
}

long ktp_encode_state_end(uint8_t* buf, size_t cap, uint64_t seq, uint64_t time) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, time);
  return ktp_writer_finish(&w, KTP_STATE_END, seq);
}

long ktp_encode_ksymbol(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_ksymbol* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->time);
  ktp_put_u32(&w, m->cpu);
  ktp_put_u64(&w, m->addr);
  ktp_put_u32(&w, m->len);
  ktp_put_u16(&w, m->ksym_type);
  ktp_put_u16(&w, m->flags);
  ktp_put_str(&w, m->name);
  return ktp_writer_finish(&w, KTP_KSYMBOL, seq);
}

long ktp_encode_bpf_event(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_bpf_event* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->time);
  ktp_put_u32(&w, m->cpu);
  ktp_put_u16(&w, m->type);
  ktp_put_u16(&w, m->flags);
  ktp_put_u32(&w, m->id);
  ktp_put(&w, m->tag, sizeof m->tag);
  return ktp_writer_finish(&w, KTP_BPF_EVENT, seq);
}

long ktp_encode_text_poke(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_text_poke* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->time);
  ktp_put_u32(&w, m->cpu);
  ktp_put_u64(&w, m->addr);
  ktp_put_sized(&w, m->old_bytes, m->old_len, KTP_MAX_BLOB);
  ktp_put_sized(&w, m->new_bytes, m->new_len, KTP_MAX_BLOB);
  return ktp_writer_finish(&w, KTP_TEXT_POKE, seq);
}

long ktp_encode_lost(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_lost* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->time);
  ktp_put_u32(&w, m->cpu);
  ktp_put_u32(&w, m->kind);
  ktp_put_u32(&w, m->record_type);
  ktp_put_u64(&w, m->count);
  return ktp_writer_finish(&w, KTP_LOST, seq);
}

long ktp_encode_guard_notice(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_guard_notice* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->time);
  ktp_put_u32(&w, m->cpu);
  ktp_put_u64(&w, m->id);
  ktp_put_u64(&w, m->start);
  ktp_put_u64(&w, m->end);
  ktp_put_u32(&w, m->kind);
  ktp_put_u64(&w, m->ack_addr);
  return ktp_writer_finish(&w, KTP_GUARD_NOTICE, seq);
}

long ktp_encode_guard_ack(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_guard_ack* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->id);
  ktp_put_u32(&w, m->status);
  return ktp_writer_finish(&w, KTP_GUARD_ACK, seq);
}

long ktp_encode_heartbeat(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_heartbeat* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, m->time);
  ktp_put_u64(&w, m->frames_sent);
  ktp_put_u64(&w, m->perf_records);
  ktp_put_u64(&w, m->text_pokes);
  ktp_put_u64(&w, m->lost_records);
  ktp_put_u64(&w, m->queue_dropped);
  return ktp_writer_finish(&w, KTP_HEARTBEAT, seq);
}

long ktp_encode_clock(uint8_t* buf, size_t cap, uint64_t seq, uint64_t time, const struct ktp_clock* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_u64(&w, time);
  ktp_put_clock(&w, m);
  return ktp_writer_finish(&w, KTP_CLOCK, seq);
}

long ktp_encode_error(uint8_t* buf, size_t cap, uint64_t seq, const struct ktp_error* m) {
  struct ktp_writer w = ktp_writer_begin(buf, cap);
  ktp_put_str(&w, m->message);
  return ktp_writer_finish(&w, KTP_ERROR, seq);
}
