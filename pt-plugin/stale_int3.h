// StaleInt3Watch: tells when a vCPU is stuck re-running an INT3 that is no
// longer in the guest's memory, so that the plugin can flush QEMU's code
// cache (plugin.cpp).
//
// Why it happens. text_poke_bp() rewrites live kernel text in three steps:
// an INT3 on the first byte, the rest, then the new first byte; a CPU that
// meets the INT3 meanwhile is sent on by poke_int3_handler(). When a CPU
// traps on an INT3 that is gone from memory, the kernel's int3 path
// (kprobe_int3_handler) takes it for a breakpoint removed just after the hit
// and returns to the same address to run what is there now. On hardware the
// retry runs the new bytes. Under multi-threaded TCG, a vCPU that was
// translating that address while another vCPU stored the new first byte can
// keep a translation made from the INT3 (most likely: the store landed
// after the bytes were read and before the page was write-protected for
// code; inferred, not traced inside QEMU), and nothing invalidates it until
// the page is written again. The retry then traps on the stale INT3 for
// ever: the guest hangs, its vCPU spinning in exc_int3 -> iret, and the
// trace grows by gigabytes. The plugin's own work
// at translation time widens the window; it was seen once in a main job
// (the static key of sched_schedstats in __schedule).
//
// The sign: a block that is one INT3, entered straight from an IRET's
// return, at the same address as the INT3 before it, `threshold` times in a
// row. A breakpoint or poke that is really there is handled and left (the
// handler moves the IP on), so it does not repeat this way; if one ever did,
// a flush only costs retranslation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ktpt {

// Is the block one INT3 (0xcc) and nothing else?
bool is_lone_int3(const uint8_t* first_insn, size_t first_size, size_t n_insns);

class StaleInt3Watch {
 public:
  // Low, so that a stuck episode adds little to a trace (each round is the
  // guest's whole int3 path, ~150-200 instructions): a threshold of 1000
  // showed up as a regression of exc_int3 and kprobe_int3_handler in a CI
  // diff of an image against itself. A real breakpoint or poke site never
  // repeats this way, and a false alarm only costs a flush.
  static constexpr uint32_t kDefaultThreshold = 16;
  explicit StaleInt3Watch(uint32_t threshold = kDefaultThreshold) : threshold_(threshold) {}

  // A block that is one INT3 (is_lone_int3() at translation) is about to
  // run: true when the vCPU is stuck there (the count then starts again).
  // Call it before on_block() for that block.
  bool on_lone_int3(uint64_t start) {
    if (!after_iret_ || start != int3_at_) {
      int3_at_ = start;
      repeats_ = 1;
      return false;
    }
    if (++repeats_ < threshold_) return false;
    repeats_ = 0;
    return true;
  }
  // Every block the vCPU runs, user blocks too: one store, as it runs on
  // every block. `ends_in_iret` comes with the block's callback (the plugin
  // registers IRET blocks with their own), so that the block itself is not
  // read: with tracing off nothing else reads it.
  void on_block(bool ends_in_iret) { after_iret_ = ends_in_iret; }
  uint64_t stuck_at() const { return int3_at_; }

 private:
  uint32_t threshold_;
  bool after_iret_ = false;
  uint64_t int3_at_ = 0;
  uint32_t repeats_ = 0;
};

}  // namespace ktpt
