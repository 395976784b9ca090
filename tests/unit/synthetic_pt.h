// Synthetic Intel PT for tests and the decode benchmark: packets written with
// libipt's encoder while walking a small hand-described program, as a CPU
// tracing kernel code with return compression off would emit them.
#pragma once

#include <intel-pt.h>

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <vector>

namespace kt::test {

class PtWriter {
 public:
  explicit PtWriter(size_t capacity = 64u << 20) : buf_(capacity) {
    pt_config config;
    pt_config_init(&config);
    config.begin = buf_.data();
    config.end = buf_.data() + buf_.size();
    enc_ = pt_alloc_encoder(&config);
    if (!enc_) throw std::runtime_error("pt_alloc_encoder failed");
  }
  ~PtWriter() { pt_free_encoder(enc_); }
  PtWriter(const PtWriter&) = delete;
  PtWriter& operator=(const PtWriter&) = delete;

  // PSB+ with tracing off at the PSB: PSB, MODE.Exec (64-bit), TSC, PSBEND.
  void psb(uint64_t tsc) {
    flush_tnt();
    simple(ppt_psb);
    mode64();
    this->tsc(tsc);
    simple(ppt_psbend);
  }
  // PSB+ while tracing is on at `ip` (the next instruction): PSB, MODE.Exec, TSC, FUP, PSBEND.
  void psb_at(uint64_t tsc, uint64_t ip) {
    flush_tnt();
    simple(ppt_psb);
    mode64();
    this->tsc(tsc);
    ip_packet(ppt_fup, ip);
    simple(ppt_psbend);
  }
  void tsc(uint64_t t) {
    flush_tnt();
    pt_packet p{};
    p.type = ppt_tsc;
    p.payload.tsc.tsc = t;
    put(p);
  }
  void pge(uint64_t ip) {
    flush_tnt();
    mode64();
    ip_packet(ppt_tip_pge, ip);
  }
  void pgd() {
    flush_tnt();
    pt_packet p{};
    p.type = ppt_tip_pgd;
    p.payload.ip.ipc = pt_ipc_suppressed;
    put(p);
  }
  // Tracing stops at a branch to `ip` (outside the traced range).
  void pgd(uint64_t ip) {
    flush_tnt();
    ip_packet(ppt_tip_pgd, ip);
  }
  void tip(uint64_t ip) {
    flush_tnt();
    ip_packet(ppt_tip, ip);
  }
  void fup(uint64_t ip) {
    flush_tnt();
    ip_packet(ppt_fup, ip);
  }
  void ovf() {
    flush_tnt();
    simple(ppt_ovf);
  }
  void tnt(bool taken) {
    bits_ = (bits_ << 1) | (taken ? 1 : 0);
    if (++nbits_ == 6) flush_tnt();
  }
  void raw(const std::vector<uint8_t>& bytes) {
    flush_tnt();
    uint64_t off = 0;
    pt_enc_get_offset(enc_, &off);
    std::copy(bytes.begin(), bytes.end(), buf_.begin() + static_cast<long>(off));
    pt_enc_sync_set(enc_, off + bytes.size());
  }
  size_t size() const {
    uint64_t off = 0;
    pt_enc_get_offset(enc_, &off);
    return static_cast<size_t>(off);
  }
  std::vector<uint8_t> finish() {
    flush_tnt();
    return std::vector<uint8_t>(buf_.begin(), buf_.begin() + static_cast<long>(size()));
  }

 private:
  void put(const pt_packet& p) {
    pt_packet copy = p;
    if (pt_enc_next(enc_, &copy) < 0) throw std::runtime_error("pt_enc_next failed");
  }
  void simple(pt_packet_type t) {
    pt_packet p{};
    p.type = t;
    put(p);
  }
  void mode64() {
    pt_packet p{};
    p.type = ppt_mode;
    p.payload.mode.leaf = pt_mol_exec;
    p.payload.mode.bits.exec.csl = 1;
    put(p);
  }
  void ip_packet(pt_packet_type t, uint64_t ip) {
    pt_packet p{};
    p.type = t;
    p.payload.ip.ipc = pt_ipc_full;
    p.payload.ip.ip = ip;
    put(p);
  }
  void flush_tnt() {
    if (!nbits_) return;
    pt_packet p{};
    p.type = ppt_tnt_8;
    p.payload.tnt.bit_size = static_cast<uint8_t>(nbits_);
    p.payload.tnt.payload = bits_;
    bits_ = 0;
    nbits_ = 0;
    put(p);
  }
  std::vector<uint8_t> buf_;
  pt_encoder* enc_ = nullptr;
  uint64_t bits_ = 0;
  int nbits_ = 0;
};

// One instruction of a hand-assembled program, as the walker needs it.
struct SimInsn {
  enum Kind { Other, Call, Jmp, Jcc, Ret };
  uint8_t len = 1;
  Kind kind = Other;
  uint64_t target = 0;  // Call, Jmp, Jcc
};
using SimProgram = std::map<uint64_t, SimInsn>;

inline constexpr uint64_t kUserAddress = 0x00007f0000001000ull;  // where the outermost return goes

// Walks from `entry` (TIP.PGE) until the outermost return (TIP.PGD to user space), emitting
// TNT for conditional branches (outcomes from `taken`) and TIP for returns.
// Returns the number of instructions executed; `trace` gets their addresses.
inline uint64_t walk(PtWriter& w, const SimProgram& prog, uint64_t entry, const std::function<bool(uint64_t)>& taken,
                     std::vector<uint64_t>* trace = nullptr) {
  w.pge(entry);
  std::vector<uint64_t> stack;
  uint64_t ip = entry, count = 0;
  for (;;) {
    auto it = prog.find(ip);
    if (it == prog.end()) throw std::runtime_error("walk: no instruction at an address");
    const SimInsn& in = it->second;
    ++count;
    if (trace) trace->push_back(ip);
    uint64_t next = ip + in.len;
    switch (in.kind) {
      case SimInsn::Other: ip = next; break;
      case SimInsn::Call:
        stack.push_back(next);
        ip = in.target;
        break;
      case SimInsn::Jmp: ip = in.target; break;
      case SimInsn::Jcc: {
        bool t = taken(ip);
        w.tnt(t);
        ip = t ? in.target : next;
        break;
      }
      case SimInsn::Ret:
        if (stack.empty()) {
          w.pgd(kUserAddress);
          return count;
        }
        ip = stack.back();
        stack.pop_back();
        w.tip(ip);
        break;
    }
  }
}

}  // namespace kt::test
