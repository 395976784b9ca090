// A bundle written with BundleWriter from synthetic pieces (tests, benchmark),
// and the hand-assembled code the decode tests run.
#pragma once

#include <stdlib.h>

#include <array>
#include <filesystem>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "kthost/bundle/bundle.h"
#include "synthetic_pt.h"

namespace kt::test {

inline std::string make_temp_dir(const char* tag) {
  std::string tmpl = std::string("/tmp/kthost-") + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back(0);
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

struct SynthBundle {
  PtStreams pt;
  std::vector<BundleEvent> events;
  std::vector<TextRecord> text;
  std::string kallsyms, modules;
  std::map<std::string, uint64_t> losses;  // losses.json

  // Writes DIR (created) and returns it; throws on failure.
  std::string write(const std::string& dir) const {
    std::vector<uint32_t> cpus;
    for (const auto& [cpu, data] : pt) cpus.push_back(cpu);
    auto w = BundleWriter::create(dir, cpus, BundleClock{});
    if (!w) throw std::runtime_error(w.error().message);
    for (const auto& [cpu, data] : pt)
      if (!(*w)->append_pt(cpu, data.data(), data.size())) throw std::runtime_error("append_pt");
    for (const auto& e : events)
      if (!(*w)->append_event_json(event_to_json(e))) throw std::runtime_error("append_event");
    for (const auto& r : text)
      if (!(*w)->append_text(r)) throw std::runtime_error("append_text");
    if (!kallsyms.empty() && !(*w)->write_whole_file("kallsyms", kallsyms)) throw std::runtime_error("kallsyms");
    if (!modules.empty() && !(*w)->write_whole_file("modules", modules)) throw std::runtime_error("modules");
    for (const auto& [name, count] : losses) (*w)->set_loss(name, count);
    auto st = (*w)->close();
    if (!st) throw std::runtime_error(st.error().message);
    return dir;
  }
};

inline BundleEvent ksymbol(uint64_t time, uint64_t addr, uint64_t len, const std::string& name, bool unregister) {
  BundleEvent e;
  e.kind = unregister ? BundleEvent::Kind::KsymbolUnregister : BundleEvent::Kind::KsymbolRegister;
  e.kind_name = "ksymbol";
  e.time = time;
  e.addr = addr;
  e.len = len;
  e.ksym_type = 1;
  e.name = name;
  return e;
}

// A BPF program's load or unload (after the ksymbols of its functions).
inline BundleEvent bpf_event(uint64_t time, uint32_t id, std::array<uint8_t, 8> tag, bool load) {
  BundleEvent e;
  e.kind = load ? BundleEvent::Kind::BpfLoad : BundleEvent::Kind::BpfUnload;
  e.kind_name = "bpf";
  e.time = time;
  e.bpf_id = id;
  e.bpf_tag = tag;
  return e;
}

inline BundleEvent text_poke(uint64_t time, uint64_t addr, std::vector<uint8_t> old_bytes,
                             std::vector<uint8_t> new_bytes) {
  BundleEvent e;
  e.kind = BundleEvent::Kind::TextPoke;
  e.kind_name = "text_poke";
  e.time = time;
  e.addr = addr;
  e.old_bytes = std::move(old_bytes);
  e.new_bytes = std::move(new_bytes);
  return e;
}

inline TextRecord text_record(TextSource source, uint64_t time, uint64_t start, std::vector<uint8_t> bytes,
                              const std::string& name = "") {
  TextRecord r;
  r.source = source;
  r.time = time;
  r.start = start;
  r.bytes = std::move(bytes);
  r.name = name;
  return r;
}

// The core-kernel test text: main_func (a loop calling f_func three times),
// f_func, and g_func (a static-key site at +0 that a poke turns into a jump).
inline constexpr uint64_t kText = 0xffffffff81000000ull;
inline constexpr uint64_t kMain = kText, kF = kText + 0x100, kG = kText + 0x200;

inline std::vector<uint8_t> core_text(size_t size) {
  std::vector<uint8_t> t(size, 0xcc);  // int3 filler
  const std::vector<uint8_t> main_code = {0x31, 0xc0,                    // +00 xor eax,eax
                                          0xe8, 0xf9, 0x00, 0x00, 0x00,  // +02 call f_func
                                          0xff, 0xc0,                    // +07 inc eax
                                          0x83, 0xf8, 0x03,              // +09 cmp eax,3
                                          0x75, 0xf4,                    // +0c jne +02
                                          0xc3};                         // +0e ret
  const std::vector<uint8_t> f_code = {0x90, 0xc3};                      // nop; ret
  const std::vector<uint8_t> g_code = {0x0f, 0x1f, 0x44, 0x00, 0x00,     // +00 nop5 (key off)
                                       0x90, 0xc3};                      // +05 nop; +06 ret
  const std::vector<uint8_t> g_slow = {0x85, 0xc0,                       // +20 test eax,eax
                                       0x74, 0x01,                       // +22 jz +25
                                       0x90, 0xc3};                      // +24 nop; +25 ret
  std::copy(main_code.begin(), main_code.end(), t.begin());
  std::copy(f_code.begin(), f_code.end(), t.begin() + 0x100);
  std::copy(g_code.begin(), g_code.end(), t.begin() + 0x200);
  std::copy(g_slow.begin(), g_slow.end(), t.begin() + 0x220);
  return t;
}
inline const std::vector<uint8_t> kGOld = {0x0f, 0x1f, 0x44, 0x00, 0x00};
inline const std::vector<uint8_t> kGNew = {0xe9, 0x1b, 0x00, 0x00, 0x00};  // jmp g_func+0x20

inline std::string core_kallsyms() {
  return "ffffffff81000000 T main_func\nffffffff81000100 T f_func\nffffffff81000200 T g_func\n"
         "ffffffff81000300 T h_func\n";
}

inline SimProgram main_program() {
  return {{kMain + 0x00, {2, SimInsn::Other, 0}},  {kMain + 0x02, {5, SimInsn::Call, kF}},
          {kMain + 0x07, {2, SimInsn::Other, 0}},  {kMain + 0x09, {3, SimInsn::Other, 0}},
          {kMain + 0x0c, {2, SimInsn::Jcc, kMain + 0x02}}, {kMain + 0x0e, {1, SimInsn::Ret, 0}},
          {kF + 0, {1, SimInsn::Other, 0}},        {kF + 1, {1, SimInsn::Ret, 0}}};
}
// main_func's loop: jne taken twice, then falls through.
inline std::function<bool(uint64_t)> main_decisions() {
  auto n = std::make_shared<int>(0);
  return [n](uint64_t) { return ++*n % 3 != 0; };
}
inline SimProgram g_program(bool poked) {
  if (!poked) return {{kG, {5, SimInsn::Other, 0}}, {kG + 5, {1, SimInsn::Other, 0}}, {kG + 6, {1, SimInsn::Ret, 0}}};
  return {{kG, {5, SimInsn::Jmp, kG + 0x20}},
          {kG + 0x20, {2, SimInsn::Other, 0}},
          {kG + 0x22, {2, SimInsn::Jcc, kG + 0x25}},
          {kG + 0x24, {1, SimInsn::Other, 0}},
          {kG + 0x25, {1, SimInsn::Ret, 0}}};
}

}  // namespace kt::test
