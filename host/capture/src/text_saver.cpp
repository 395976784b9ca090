#include "kthost/capture/text_saver.h"

#include <algorithm>

#include "kthost/common/strings.h"
#include "kthost_shared.h"
#include "ktproto.h"

namespace kt {
namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}
constexpr size_t kMaxLostNames = 64;
constexpr size_t kRecentMax = 4096;
constexpr uint64_t kRecentBytesMax = 64u << 20;

bool all_int3(const std::vector<uint8_t>& b) {
  return !b.empty() && std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0xCC; });
}

// The unload events whose text each of ktguard's hooked paths frees
// (guest-kit/ktguard/guard_hooks.c), as bits.
constexpr uint32_t kBpf = 1, kOol = 2, kModule = 4, kAll = kBpf | kOol | kModule;
uint32_t kind_bit(uint16_t kind) {
  switch (kind) {
    case KTHOST_TEXT_KSYMBOL_BPF: return kBpf;
    case KTHOST_TEXT_KSYMBOL_OOL: return kOol;
    case KTHOST_TEXT_MODULE: return kModule;
  }
  return kAll;
}
struct FreeingPath {
  const char* function;
  uint32_t frees;
  const char* what;
};
constexpr FreeingPath kFreeingPaths[] = {
    {"bpf_prog_pack_free", kBpf, "BPF JIT images"},
    {"bpf_dispatcher_change_prog", kBpf, "BPF dispatcher images"},
    {"module_memfree", kBpf | kOol, "BPF trampolines, large JIT images, ftrace trampolines"},
    {"__free_insn_slot", kOol, "kprobe instruction slots"},
    {"module_notifier", kModule, "module text"},
};

}  // namespace

std::vector<std::string> TextSaver::set_guard_hooks(const std::vector<GuardHook>& hooks) {
  std::vector<std::string> unheld;
  unheld_ = 0;
  for (const auto& path : kFreeingPaths) {
    auto it = std::find_if(hooks.begin(), hooks.end(), [&](const GuardHook& h) { return h.function == path.function; });
    if (it != hooks.end() && it->held()) continue;
    unheld_ |= path.frees;
    unheld.push_back(std::string(path.function) + " (" + path.what + "): " + (it == hooks.end() ? "not reported" : it->how));
  }
  for (const auto& h : hooks) {  // a path this host does not know, unhooked: assume the worst
    bool known = std::any_of(std::begin(kFreeingPaths), std::end(kFreeingPaths),
                             [&](const FreeingPath& p) { return h.function == p.function; });
    if (!known && !h.held()) {
      unheld_ = kAll;
      unheld.push_back(h.function + " (unknown to this kthost): " + h.how);
    }
  }
  return unheld;
}

bool TextSaver::held(uint16_t kind) const { return guard_ && !(unheld_ & kind_bit(kind)); }

TextSaver::TextSaver(PageWalker& walker, Sink sink, bool guard)
    : walker_(walker), sink_(std::move(sink)), guard_(guard) {}

Status TextSaver::copy(uint64_t start, uint64_t len, std::vector<uint8_t>* out) {
  // The guest maps and unmaps vmalloc text all the time: never trust a
  // cached translation for it.
  walker_.flush_cache();
  out->resize(len);
  return walker_.read_virtual(start, out->data(), len);
}

void TextSaver::save(TextRecord&& r) {
  stats_.bytes_saved += r.bytes.size();
  if (!sink_(r)) stats_.store_errors++;
}

HoldRecord TextSaver::on_guard_notice(const SidebandEvent& ev, const GuardNoticeEvent& n) {
  auto t0 = Clock::now();
  HoldRecord h;
  h.id = n.id;
  h.start = n.start;
  h.end = n.end;
  h.kind = n.kind;
  h.cpu = ev.cpu;
  h.guest_time = ev.time;
  stats_.guard_notices++;
  if (n.end <= n.start || n.end - n.start > kMaxCopy) {
    h.status = KTP_HOLD_NOT_SAVED;
    h.error = "range of " + std::to_string(n.end - n.start) + " bytes is empty or over the " +
              human_bytes(kMaxCopy) + " limit";
  } else {
    TextRecord r;
    r.time = ev.time;
    r.start = n.start;
    r.source = TextSource::Guard;
    r.kind = static_cast<uint16_t>(n.kind);
    r.id = n.id;
    if (auto st = copy(n.start, n.end - n.start, &r.bytes); !st) {
      h.status = KTP_HOLD_NOT_SAVED;
      h.error = st.error().message;
    } else {
      live_.erase(n.start);
      recent_.push_back(Saved{n.start, n.end, ev.time, r.bytes});
      recent_bytes_ += r.bytes.size();
      while (recent_.size() > kRecentMax || recent_bytes_ > kRecentBytesMax) {
        recent_bytes_ -= recent_.front().bytes.size();
        recent_.pop_front();
      }
      save(std::move(r));
    }
  }
  if (h.status == KTP_HOLD_SAVED) stats_.guard_saved++;
  else stats_.guard_failed++;
  // Only a saved range ends the hold early; a failure goes by the channel
  // ack alone, whose status reports it.
  if (h.status == KTP_HOLD_SAVED && n.ack_addr && word_writer_) {
    if (auto st = word_writer_(n.ack_addr, n.id); st) {
      h.word_acked = true;
      stats_.word_acks++;
    } else {
      h.word_error = st.error().message;
      stats_.word_ack_failed++;
    }
  }
  h.copy_us = us_since(t0);
  return h;
}

void TextSaver::load(const SidebandEvent& ev, uint64_t addr, uint64_t len, uint16_t kind, const std::string& name) {
  if (len == 0 || len > kMaxCopy) return;
  TextRecord r;
  r.time = ev.time;
  r.start = addr;
  r.source = TextSource::Load;
  r.kind = kind;
  r.name = name;
  // Was this text already freed (the notice overtook this event)?
  const Saved* from = nullptr;
  for (auto it = recent_.rbegin(); it != recent_.rend() && !from; ++it)
    if (it->start <= addr && addr + len <= it->end && it->time >= ev.time) from = &*it;
  if (from) {
    auto off = static_cast<ptrdiff_t>(addr - from->start);
    r.bytes.assign(from->bytes.begin() + off, from->bytes.begin() + off + static_cast<ptrdiff_t>(len));
    stats_.loads_from_guard++;
  } else if (!copy(addr, len, &r.bytes)) {
    stats_.load_failed++;
    return;
  }
  stats_.load_copies++;
  if (!held(kind)) live_[addr] = Live{len, r.bytes};
  save(std::move(r));
}

void TextSaver::unload(const SidebandEvent& ev, uint64_t addr, uint64_t len, uint16_t kind, const std::string& name) {
  stats_.unloads_seen++;
  if (held(kind) || len == 0 || len > kMaxCopy) return;
  TextRecord r;
  r.time = ev.time;
  r.start = addr;
  r.source = TextSource::Unregister;
  r.kind = kind;
  r.name = name;
  std::string why;
  if (auto st = copy(addr, len, &r.bytes); !st) {
    why = "unreadable: " + st.error().message;
  } else {
    auto it = live_.find(addr);
    if (all_int3(r.bytes)) why = "overwritten with int3";
    else if (it != live_.end() && it->second.len == len && it->second.bytes != r.bytes)
      why = "changed since load";
    stats_.unregister_copies++;
    save(std::move(r));
  }
  live_.erase(addr);
  if (why.empty()) {
    stats_.unloads_unverified++;
  } else {
    stats_.unloads_lost++;
    if (lost_.size() < kMaxLostNames)
      lost_.push_back(name + " [" + hex(addr) + ", " + hex(addr + len) + "): " + why);
  }
}

void TextSaver::on_event(const SidebandEvent& ev) {
  if (const auto* k = std::get_if<KsymbolEvent>(&ev.body)) {
    // PERF_RECORD_KSYMBOL_TYPE_BPF (1) and _OOL (2) are text; other types are not.
    const uint16_t kind = k->ksym_type == 1   ? KTHOST_TEXT_KSYMBOL_BPF
                          : k->ksym_type == 2 ? KTHOST_TEXT_KSYMBOL_OOL
                                              : 0;
    if (kind == 0) return;
    if (k->unregister) unload(ev, k->addr, k->len, kind, k->name);
    else load(ev, k->addr, k->len, kind, k->name);
  } else if (const auto* m = std::get_if<ModuleEvent>(&ev.body)) {
    if (m->text_size == 0) return;
    // The module's executable core is more than .text (.text.unlikely,
    // .exit.text, ...): take every executable page from .text on, within
    // the module's core.
    uint64_t len = m->text_size;
    if (m->core_addr <= m->text_addr && m->text_addr < m->core_addr + m->core_size) {
      uint64_t limit = m->core_addr + m->core_size, end = m->text_addr + m->text_size;
      walker_.flush_cache();
      for (uint64_t page = m->text_addr & ~uint64_t{0xfff}; page < limit; page += 0x1000) {
        auto t = walker_.translate(page);
        if (!t || !t->executable) break;
        end = std::max(end, std::min(limit, page + 0x1000));
      }
      len = end - m->text_addr;
    }
    if (m->load) load(ev, m->text_addr, len, KTHOST_TEXT_MODULE, m->name);
    else unload(ev, m->text_addr, len, KTHOST_TEXT_MODULE, m->name);
  }
}

}  // namespace kt
