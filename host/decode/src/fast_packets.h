// Private: a minimal Intel PT packet reader for the coverage walk
// (coverage_walk.cpp). It knows the packets a kernel trace carries (Intel SDM
// vol. 3, "Intel Processor Trace", packet formats) and says Unknown for the
// rest; the walk hands such a piece to the full decoder. Every read is
// bounded by `end`: a packet cut short is Truncated, never read past.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kt {

enum class FastPacket : uint8_t {
  Pad,
  Tnt,       // bits (MSB first: the oldest branch), count
  Tip,       // ip
  TipPge,    // ip
  TipPgd,    // ip (may be suppressed)
  Fup,       // ip
  Psb,
  PsbEnd,
  Mode,      // mode byte
  Tsc,       // value
  Timing,    // MTC, CYC: time from the core crystal clock
  Ignored,   // CBR, TMA, PIP, VMCS, MNT, PWRE, PWRX, EXSTOP, MWAIT, TraceStop
  Ovf,
  Unknown,
  Truncated,
};

struct FastPacketInfo {
  FastPacket kind = FastPacket::Unknown;
  uint32_t size = 0;       // bytes
  uint32_t tnt_count = 0;  // Tnt: number of bits
  uint64_t tnt_bits = 0;   // Tnt: bit tnt_count-1 is the oldest
  bool ip_suppressed = false;
  uint64_t value = 0;      // Tsc, Mode; IP packets: the reconstructed IP
};

// IP compression (SDM "IP Packets"): 0 suppressed, 1 two bytes, 2 four bytes,
// 3 six bytes sign-extended, 4 six bytes updating the low 48, 6 eight bytes.
inline bool fast_ip(const uint8_t* p, const uint8_t* end, unsigned ipbytes, uint64_t& last_ip, FastPacketInfo& out) {
  static constexpr uint8_t kLen[8] = {0, 2, 4, 6, 6, 0xff, 8, 0xff};
  const unsigned n = kLen[ipbytes & 7];
  if (n == 0xff) return false;
  out.size = 1 + n;
  if (end - p < static_cast<ptrdiff_t>(out.size)) {
    out.kind = FastPacket::Truncated;
    return true;
  }
  if (n == 0) {
    out.ip_suppressed = true;
    out.value = last_ip;
    return true;
  }
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[1 + i]) << (8 * i);
  uint64_t ip;
  switch (ipbytes) {
    case 1: ip = (last_ip & ~uint64_t{0xffff}) | v; break;
    case 2: ip = (last_ip & ~uint64_t{0xffffffff}) | v; break;
    case 3: ip = (v & (uint64_t{1} << 47)) ? v | 0xffff000000000000ull : v; break;
    case 4: ip = (last_ip & 0xffff000000000000ull) | v; break;
    default: ip = v; break;
  }
  last_ip = ip;
  out.value = ip;
  return true;
}

// Reads the packet at p (p < end). last_ip is the IP compression state.
inline FastPacketInfo read_fast_packet(const uint8_t* p, const uint8_t* end, uint64_t& last_ip) {
  FastPacketInfo out;
  const ptrdiff_t left = end - p;
  const uint8_t b = p[0];
  auto need = [&](uint32_t size, FastPacket kind) {
    out.size = size;
    out.kind = left < static_cast<ptrdiff_t>(size) ? FastPacket::Truncated : kind;
    return out;
  };
  if (b == 0x00) return need(1, FastPacket::Pad);
  if ((b & 1) == 0 && b != 0x02) {  // short TNT: a stop bit above 1..6 bits, header bit 0 clear
    unsigned stop = 7;
    while (!(b & (1u << stop))) --stop;
    out.kind = FastPacket::Tnt;
    out.size = 1;
    out.tnt_count = stop - 1;
    out.tnt_bits = (b >> 1) & ((1u << out.tnt_count) - 1);
    return out;
  }
  switch (b & 0x1f) {
    case 0x0d: out.kind = FastPacket::Tip; break;
    case 0x11: out.kind = FastPacket::TipPge; break;
    case 0x01: out.kind = FastPacket::TipPgd; break;
    case 0x1d: out.kind = FastPacket::Fup; break;
    default: break;
  }
  if (out.kind != FastPacket::Unknown) {
    if (!fast_ip(p, end, b >> 5, last_ip, out)) out.kind = FastPacket::Unknown;
    return out;
  }
  if (b == 0x99) {
    need(2, FastPacket::Mode);
    if (out.kind == FastPacket::Mode) out.value = p[1];
    return out;
  }
  if (b == 0x19) {
    need(8, FastPacket::Tsc);
    if (out.kind == FastPacket::Tsc)
      for (int i = 0; i < 7; ++i) out.value |= static_cast<uint64_t>(p[1 + i]) << (8 * i);
    return out;
  }
  if (b == 0x59) return need(2, FastPacket::Timing);  // MTC
  if ((b & 3) == 3) {                                  // CYC: more bytes while bit 0 (bit 2 in the first) is set
    uint32_t size = 1;
    bool more = (b & 4) != 0;
    while (more) {
      if (size >= left) return need(size + 1, FastPacket::Truncated);
      more = (p[size] & 1) != 0;
      ++size;
      if (size > 16) return need(size, FastPacket::Unknown);
    }
    return need(size, FastPacket::Timing);
  }
  if (b != 0x02) return need(1, FastPacket::Unknown);
  if (left < 2) return need(2, FastPacket::Truncated);
  switch (p[1]) {
    case 0xa3: {  // long TNT: 48 payload bits with a stop bit
      need(8, FastPacket::Tnt);
      if (out.kind != FastPacket::Tnt) return out;
      uint64_t v = 0;
      for (int i = 0; i < 6; ++i) v |= static_cast<uint64_t>(p[2 + i]) << (8 * i);
      if (v == 0) return need(8, FastPacket::Unknown);
      unsigned stop = 63;
      while (!(v & (uint64_t{1} << stop))) --stop;
      out.tnt_count = stop;
      out.tnt_bits = v & ((uint64_t{1} << stop) - 1);
      return out;
    }
    case 0x82: {
      need(16, FastPacket::Psb);
      if (out.kind != FastPacket::Psb) return out;
      for (int i = 0; i < 16; i += 2)
        if (p[i] != 0x02 || p[i + 1] != 0x82) return need(16, FastPacket::Unknown);
      return out;
    }
    case 0x23: return need(2, FastPacket::PsbEnd);
    case 0xf3: return need(2, FastPacket::Ovf);
    case 0x03: return need(4, FastPacket::Ignored);   // CBR
    case 0x73: return need(8, FastPacket::Ignored);   // TMA
    case 0x43: return need(8, FastPacket::Ignored);   // PIP
    case 0xc8: return need(7, FastPacket::Ignored);   // VMCS
    case 0x83: return need(2, FastPacket::Ignored);   // TraceStop
    case 0x22: return need(4, FastPacket::Ignored);   // PWRE
    case 0xa2: return need(7, FastPacket::Ignored);   // PWRX
    case 0x62:
    case 0xe2: return need(2, FastPacket::Ignored);   // EXSTOP
    case 0xc2: return need(10, FastPacket::Ignored);  // MWAIT
    case 0xc3:                                        // MNT
      if (left >= 3 && p[2] == 0x88) return need(11, FastPacket::Ignored);
      return need(3, left < 3 ? FastPacket::Truncated : FastPacket::Unknown);
    default: return need(2, FastPacket::Unknown);
  }
}

}  // namespace kt
