#include "kthost/sideband/decoder.h"

#include <algorithm>

#include "kthost/common/strings.h"
#include "ktproto.h"

namespace kt {

namespace {

std::string to_string(const ktp_str& s) { return sanitize_name(std::string_view(s.data, s.len), KTP_MAX_STRING); }

std::string tag_hex(const uint8_t tag[8]) { return hex_bytes(tag, 8); }

GuestClock to_clock(const ktp_clock& c) {
  GuestClock g;
  g.time_zero = c.time_zero;
  g.time_mult = c.time_mult;
  g.time_shift = c.time_shift;
  g.valid = c.cap_user_time_zero != 0 && c.time_mult != 0 && c.time_shift < 64;
  return g;
}

}  // namespace

SidebandDecoder::SidebandDecoder()
    : message_(std::make_unique<ktp_message>()), storage_(std::make_unique<ktp_message_storage>()) {}
SidebandDecoder::~SidebandDecoder() = default;
SidebandDecoder::SidebandDecoder(SidebandDecoder&&) noexcept = default;
SidebandDecoder& SidebandDecoder::operator=(SidebandDecoder&&) noexcept = default;

void SidebandDecoder::reset() {
  buffer_.clear();
  buffer_offset_ = 0;
  have_seq_ = false;
  in_dump_ = false;
  pending_ = GuestState{};
}

void SidebandDecoder::frame_error(uint64_t offset, const std::string& reason) {
  if (errors_.size() >= kRecentErrors) errors_.pop_front();
  errors_.push_back({offset, reason});
}

void SidebandDecoder::feed(const uint8_t* data, size_t len, std::vector<SidebandEvent>* out) {
  stats_.bytes += len;
  buffer_.insert(buffer_.end(), data, data + len);
  size_t pos = 0;
  while (pos < buffer_.size()) {
    ktp_frame frame{};
    size_t consumed = 0;
    int st = ktp_decode_frame(buffer_.data() + pos, buffer_.size() - pos, &frame, &consumed);
    uint64_t offset = buffer_offset_ + pos;
    if (st == KTP_NEED_MORE) break;
    if (st == KTP_OK) {
      handle_frame(frame, offset, out);
      pos += consumed;
      continue;
    }
    switch (st) {
      case KTP_ERR_MAGIC: ++stats_.bad_magic; break;
      case KTP_ERR_VERSION: {
        ++stats_.bad_version;
        uint8_t v = buffer_.size() - pos > 4 ? buffer_[pos + 4] : 0;
        version_mismatch_ = true;
        version_error_ = "the guest speaks sideband protocol v" + std::to_string(v) + "; this kthost speaks v" +
                         std::to_string(KTP_VERSION) + " (update ktguest or kthost so that they match)";
        break;
      }
      case KTP_ERR_LENGTH: ++stats_.bad_length; break;
      case KTP_ERR_CRC: ++stats_.bad_crc; break;
      case KTP_ERR_TYPE: ++stats_.bad_type; break;
      default: ++stats_.bad_payload; break;
    }
    if (st != KTP_ERR_MAGIC || stats_.bad_magic % 4096 == 1)
      frame_error(offset, std::string(ktp_status_name(st)));
    // Resynchronise at the next magic after this position. A bad frame's own
    // length is not trusted to skip it: it may be the corrupt field.
    size_t skip = 1 + ktp_find_magic(buffer_.data() + pos + 1, buffer_.size() - pos - 1);
    stats_.skipped_bytes += skip;
    pos += skip;
  }
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<long>(pos));
  buffer_offset_ += pos;
}

void SidebandDecoder::check_seq(const ktp_frame& f, uint64_t offset) {
  if (f.type == KTP_HELLO) have_seq_ = false;  // HELLO restarts the sequence
  if (have_seq_) {
    if (f.seq <= last_seq_) {
      ++stats_.out_of_order;
      frame_error(offset, "sequence number " + std::to_string(f.seq) + " after " + std::to_string(last_seq_));
    } else if (f.seq != last_seq_ + 1) {
      ++stats_.seq_gaps;
      stats_.frames_missing += f.seq - last_seq_ - 1;
      frame_error(offset, "sequence gap: " + std::to_string(f.seq - last_seq_ - 1) + " frames missing");
    }
  }
  have_seq_ = true;
  last_seq_ = f.seq;
}

void SidebandDecoder::handle_frame(const ktp_frame& f, uint64_t offset, std::vector<SidebandEvent>* out) {
  ++stats_.frames;
  check_seq(f, offset);
  const char* name = ktp_type_name(f.type);
  if (ktp_type_sender(f.type) == KTP_SENDER_HOST) {
    frame_error(offset, std::string(name) + " (type " + std::to_string(f.type) + ") goes host to guest, not from the guest");
    ++stats_.bad_type;
    return;
  }
  int st = ktp_parse_message(&f, message_.get(), storage_.get());
  if (st != KTP_OK) {
    ++stats_.bad_payload;
    frame_error(offset, std::string(name ? name : "frame") + " (type " + std::to_string(f.type) +
                            "): " + ktp_status_name(st));
    return;
  }
  SidebandEvent ev;
  ev.seq = f.seq;
  on_message(*message_, std::move(ev), offset, out);
}

void SidebandDecoder::on_message(const ktp_message& msg, SidebandEvent ev, uint64_t offset,
                                 std::vector<SidebandEvent>* out) {
  auto emit = [&](uint64_t time, EventBody body) {
    ev.time = time;
    ev.body = std::move(body);
    out->push_back(std::move(ev));
  };
  switch (static_cast<ktp_type>(msg.type)) {
    case KTP_HELLO: {
      const ktp_hello& m = msg.u.hello;
      clock_ = to_clock(m.clock);
      emit(m.boot_time_ns, HelloEvent{m.proto_minor, m.cpu_count, m.boot_time_ns, m.session, clock_,
                                      to_string(m.release), to_string(m.build_id)});
      return;
    }
    case KTP_CLOCK:
      clock_ = to_clock(msg.u.clock_change.clock);
      emit(msg.u.clock_change.time, ClockEvent{clock_});
      return;
    case KTP_STATE_BEGIN:
      pending_ = GuestState{};
      in_dump_ = true;
      dump_reason_ = msg.u.state_begin.reason;
      return;
    case KTP_STATE_SYMBOLS: {
      const ktp_state_symbols& m = msg.u.state_symbols;
      if (!in_dump_) return frame_error(offset, "STATE_SYMBOLS outside a state dump");
      for (uint32_t i = 0; i < m.count && pending_.symbols.size() < kMaxStateSymbols; ++i)
        pending_.symbols.push_back({m.symbols[i].addr, static_cast<char>(m.symbols[i].type),
                                    to_string(m.symbols[i].name), to_string(m.symbols[i].module)});
      return;
    }
    case KTP_STATE_MODULE:
    case KTP_MODULE_LOAD:
    case KTP_MODULE_UNLOAD: {
      const ktp_module& m = msg.u.module;
      GuestModuleRecord rec{to_string(m.name), m.text_addr, m.text_size, m.core_addr, m.core_size};
      if (msg.type == KTP_STATE_MODULE) {
        if (in_dump_ && pending_.modules.size() < kMaxStateModules) pending_.modules.push_back(rec);
        return;
      }
      emit(m.time, ModuleEvent{msg.type == KTP_MODULE_LOAD, rec.name, rec.text_addr, rec.text_size, rec.core_addr,
                               rec.core_size});
      return;
    }
    case KTP_STATE_BPF: {
      const ktp_bpf_prog& m = msg.u.bpf_prog;
      if (in_dump_ && pending_.bpf_progs.size() < kMaxStateBpf)
        pending_.bpf_progs.push_back({m.id, m.prog_type, tag_hex(m.tag), to_string(m.name), m.jited_addr, m.jited_len});
      return;
    }
    case KTP_STATE_CPUS:
      if (in_dump_) pending_.cpus.assign(msg.u.cpus.cpus, msg.u.cpus.cpus + msg.u.cpus.count);
      return;
    case KTP_STATE_END:
      if (!in_dump_) return frame_error(offset, "STATE_END without STATE_BEGIN");
      in_dump_ = false;
      pending_.complete = true;
      state_ = std::move(pending_);
      pending_ = GuestState{};
      emit(msg.u.state_end.time, StateDumpEvent{dump_reason_, state_.symbols.size(), state_.modules.size(),
                                                state_.bpf_progs.size(), state_.cpus.size()});
      return;
    case KTP_KSYMBOL: {
      const ktp_ksymbol& m = msg.u.ksymbol;
      ev.cpu = m.cpu;
      emit(m.time, KsymbolEvent{m.addr, m.len, m.ksym_type, (m.flags & 1) != 0, to_string(m.name)});
      return;
    }
    case KTP_BPF_EVENT: {
      const ktp_bpf_event& m = msg.u.bpf_event;
      ev.cpu = m.cpu;
      emit(m.time, BpfEvent{m.type == 1, m.id, tag_hex(m.tag)});
      return;
    }
    case KTP_TEXT_POKE: {
      const ktp_text_poke& m = msg.u.text_poke;
      ev.cpu = m.cpu;
      emit(m.time, TextPokeEvent{m.addr, std::vector<uint8_t>(m.old_bytes, m.old_bytes + m.old_len),
                                 std::vector<uint8_t>(m.new_bytes, m.new_bytes + m.new_len)});
      return;
    }
    case KTP_LOST: {
      const ktp_lost& m = msg.u.lost;
      ev.cpu = m.cpu;
      emit(m.time, LostEvent{m.kind, m.record_type, m.count});
      return;
    }
    case KTP_GUARD_NOTICE: {
      const ktp_guard_notice& m = msg.u.guard_notice;
      ev.cpu = m.cpu;
      emit(m.time, GuardNoticeEvent{m.id, m.start, m.end, m.kind, m.ack_addr});
      return;
    }
    case KTP_HEARTBEAT: {
      const ktp_heartbeat& m = msg.u.heartbeat;
      emit(m.time, HeartbeatEvent{m.frames_sent, m.perf_records, m.text_pokes, m.lost_records, m.queue_dropped});
      return;
    }
    case KTP_ERROR:
      emit(0, ErrorEvent{to_string(msg.u.error.message)});
      return;
    case KTP_GUARD_STATE:
      emit(msg.u.guard_state.time, GuardStateEvent{msg.u.guard_state.state, to_string(msg.u.guard_state.reason)});
      return;
    case KTP_GUARD_HOOKS:
      // Raw: the text is lines, which to_string would flatten; the parser checks every line.
      emit(msg.u.guard_hooks.time,
           parse_guard_hooks(std::string_view(msg.u.guard_hooks.hooks.data, msg.u.guard_hooks.hooks.len)));
      return;
    case KTP_TASK_SWITCHES: {
      const ktp_task_switches& m = msg.u.task_switches;
      if (m.count % 2 != 0) {
        ++stats_.bad_payload;
        return frame_error(offset, "TASK_SWITCHES: an odd count of words (" +
                                                           std::to_string(m.count) + "), not (time, tid) pairs");
      }
      TaskSwitchesEvent body;
      body.switches.reserve(m.count / 2);
      for (uint32_t i = 0; i < m.count; i += 2) body.switches.push_back({m.time + m.switches[i], m.switches[i + 1]});
      ev.cpu = m.cpu;
      emit(m.time, std::move(body));
      return;
    }
    case KTP_HELLO_ACK:
    case KTP_GUARD_ACK:
    case KTP_HOST_HELLO:
      return;  // host to guest: refused in handle_frame
  }
}

}  // namespace kt
