// The observer effect: the share of a trace that kthost's own guest side
// caused. An instruction is the observer's when a frame of its stack, from
// the root, is one of these (the first such frame decides the part):
//   ktguard          any function of the ktguard module (holds, its device)
//   ktguest channel  any function of virtio_console: the org.kthost ports of
//                    ktguest and ktexec (other ports on it would count too)
//   perf sideband    the kernel's output of the records ktguest asks for
//                    (ksymbol, BPF and text_poke events, module tracepoints
//                    through perf) and the polls and wakeups of its rings
//   kallsyms reads   /proc/kallsyms's seq_file functions (kernel/kallsyms.c),
//                    whoever reads it: ktguest no longer does during a trace
// ktguard's wrapper frame does not claim the hooked function it calls on to
// (bpf_prog_pack_free under ktg_wrap_prog_pack_free): that is the kernel's
// own work, which runs the same without kthost.
// Only the frames from the topmost interrupt or exception entry up count: a
// timer tick that strikes during a hold is not the observer's doing (the
// channel's own interrupt handlers, above their entry, are).
// A lower bound: ktguest's system call entry and exit, its timer and its
// scheduling are not told apart from the workload's.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kthost/decode/decoder.h"
#include "kthost/decode/symbolizer.h"

namespace kt {

struct ObserverShare {
  uint64_t total = 0;                     // every decoded instruction
  uint64_t insns = 0;                     // of them, the observer's
  std::map<std::string, uint64_t> parts;  // by part name (above); every part present
  double percent() const { return total ? 100.0 * static_cast<double>(insns) / static_cast<double>(total) : 0.0; }
};

ObserverShare observer_share(const Profile& profile, const Symbolizer& symbols);

// "observer: 0.42% of instructions are kthost's own (ktguard 0.20%, ...)"
std::string format_observer_line(const ObserverShare& share);

}  // namespace kt
