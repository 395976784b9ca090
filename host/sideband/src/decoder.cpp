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

void SidebandDecoder::handle_frame(const ktp_frame& f, uint64_t offset, std::vector<SidebandEvent>* out) {
  ++stats_.frames;
  if (f.type == KTP_HELLO) {
    have_seq_ = false;  // HELLO restarts the sequence
  }
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

  SidebandEvent ev;
  ev.seq = f.seq;
  int st = KTP_OK;
  auto emit = [&](EventBody body) {
    ev.body = std::move(body);
    out->push_back(std::move(ev));
  };
  switch (f.type) {
    case KTP_HELLO: {
      ktp_hello m{};
      if ((st = ktp_parse_hello(&f, &m)) != KTP_OK) break;
      HelloEvent h{m.proto_minor, m.cpu_count, m.boot_time_ns, m.session, to_clock(m.clock),
                   to_string(m.release), to_string(m.build_id)};
      clock_ = h.clock;
      ev.time = m.boot_time_ns;
      emit(std::move(h));
      break;
    }
    case KTP_CLOCK: {
      ktp_clock c{};
      uint64_t t = 0;
      if ((st = ktp_parse_clock(&f, &t, &c)) != KTP_OK) break;
      clock_ = to_clock(c);
      ev.time = t;
      emit(ClockEvent{clock_});
      break;
    }
    case KTP_STATE_BEGIN: {
      ktp_state_begin m{};
      if ((st = ktp_parse_state_begin(&f, &m)) != KTP_OK) break;
      pending_ = GuestState{};
      in_dump_ = true;
      dump_reason_ = m.reason;
      break;
    }
    case KTP_STATE_SYMBOLS: {
      std::vector<ktp_symbol> slots(KTP_MAX_BATCH);
      ktp_state_symbols m{0, slots.data()};
      if ((st = ktp_parse_state_symbols(&f, &m)) != KTP_OK) break;
      if (!in_dump_) {
        frame_error(offset, "STATE_SYMBOLS outside a state dump");
        break;
      }
      for (uint32_t i = 0; i < m.count && pending_.symbols.size() < kMaxStateSymbols; ++i)
        pending_.symbols.push_back({m.symbols[i].addr, static_cast<char>(m.symbols[i].type),
                                    to_string(m.symbols[i].name), to_string(m.symbols[i].module)});
      break;
    }
    case KTP_STATE_MODULE:
    case KTP_MODULE_LOAD:
    case KTP_MODULE_UNLOAD: {
      ktp_module m{};
      if ((st = ktp_parse_module(&f, &m)) != KTP_OK) break;
      GuestModuleRecord rec{to_string(m.name), m.text_addr, m.text_size, m.core_addr, m.core_size};
      if (f.type == KTP_STATE_MODULE) {
        if (in_dump_ && pending_.modules.size() < kMaxStateModules) pending_.modules.push_back(rec);
        break;
      }
      ev.time = m.time;
      emit(ModuleEvent{f.type == KTP_MODULE_LOAD, rec.name, rec.text_addr, rec.text_size, rec.core_addr, rec.core_size});
      break;
    }
    case KTP_STATE_BPF: {
      ktp_bpf_prog m{};
      if ((st = ktp_parse_bpf_prog(&f, &m)) != KTP_OK) break;
      if (in_dump_ && pending_.bpf_progs.size() < kMaxStateBpf)
        pending_.bpf_progs.push_back({m.id, m.prog_type, tag_hex(m.tag), to_string(m.name), m.jited_addr, m.jited_len});
      break;
    }
    case KTP_STATE_CPUS: {
      std::vector<uint32_t> slots(KTP_MAX_CPUS);
      ktp_cpus m{0, slots.data()};
      if ((st = ktp_parse_cpus(&f, &m)) != KTP_OK) break;
      if (in_dump_) pending_.cpus.assign(m.cpus, m.cpus + m.count);
      break;
    }
    case KTP_STATE_END: {
      uint64_t t = 0;
      if ((st = ktp_parse_state_end(&f, &t)) != KTP_OK) break;
      if (!in_dump_) {
        frame_error(offset, "STATE_END without STATE_BEGIN");
        break;
      }
      in_dump_ = false;
      pending_.complete = true;
      state_ = std::move(pending_);
      pending_ = GuestState{};
      ev.time = t;
      emit(StateDumpEvent{dump_reason_, state_.symbols.size(), state_.modules.size(), state_.bpf_progs.size(),
                          state_.cpus.size()});
      break;
    }
    case KTP_KSYMBOL: {
      ktp_ksymbol m{};
      if ((st = ktp_parse_ksymbol(&f, &m)) != KTP_OK) break;
      ev.time = m.time;
      ev.cpu = m.cpu;
      emit(KsymbolEvent{m.addr, m.len, m.ksym_type, (m.flags & 1) != 0, to_string(m.name)});
      break;
    }
    case KTP_BPF_EVENT: {
      ktp_bpf_event m{};
      if ((st = ktp_parse_bpf_event(&f, &m)) != KTP_OK) break;
      ev.time = m.time;
      ev.cpu = m.cpu;
      emit(BpfEvent{m.type == 1, m.id, tag_hex(m.tag)});
      break;
    }
    case KTP_TEXT_POKE: {
      ktp_text_poke m{};
      if ((st = ktp_parse_text_poke(&f, &m)) != KTP_OK) break;
      ev.time = m.time;
      ev.cpu = m.cpu;
      emit(TextPokeEvent{m.addr, std::vector<uint8_t>(m.old_bytes, m.old_bytes + m.old_len),
                         std::vector<uint8_t>(m.new_bytes, m.new_bytes + m.new_len)});
      break;
    }
    case KTP_LOST: {
      ktp_lost m{};
      if ((st = ktp_parse_lost(&f, &m)) != KTP_OK) break;
      ev.time = m.time;
      ev.cpu = m.cpu;
      emit(LostEvent{m.kind, m.record_type, m.count});
      break;
    }
    case KTP_GUARD_NOTICE: {
      ktp_guard_notice m{};
      if ((st = ktp_parse_guard_notice(&f, &m)) != KTP_OK) break;
      ev.time = m.time;
      ev.cpu = m.cpu;
      emit(GuardNoticeEvent{m.id, m.start, m.end, m.kind, m.ack_addr});
      break;
    }
    case KTP_HEARTBEAT: {
      ktp_heartbeat m{};
      if ((st = ktp_parse_heartbeat(&f, &m)) != KTP_OK) break;
      ev.time = m.time;
      emit(HeartbeatEvent{m.frames_sent, m.perf_records, m.text_pokes, m.lost_records, m.queue_dropped});
      break;
    }
    case KTP_ERROR: {
      ktp_error m{};
      if ((st = ktp_parse_error(&f, &m)) != KTP_OK) break;
      emit(ErrorEvent{to_string(m.message)});
      break;
    }
    default:
      // HELLO_ACK and GUARD_ACK go host->guest; from the guest they are wrong.
      frame_error(offset, "unexpected frame type " + std::to_string(f.type) + " from the guest");
      ++stats_.bad_type;
      return;
  }
  if (st != KTP_OK) {
    ++stats_.bad_payload;
    frame_error(offset, std::string("frame type ") + std::to_string(f.type) + ": " + ktp_status_name(st));
  }
}

}  // namespace kt
