// ktpt.so: a QEMU 7.2 TCG plugin that writes a software Intel PT stream of
// guest kernel execution, one file per vCPU (OUT/cpuN.pt), and optionally the
// ground truth (OUT/cpuN.gt: every executed kernel instruction address as a
// little-endian u64; consecutive iterations of one REP string instruction are
// written once, and an instruction that faulted is left out, as PT shows them).
//
//   -plugin file=ktpt.so,out=DIR[,gt=on][,truth=on][,psb=4096][,trigger=PATH][,defer=BYTES]
//
// truth=on: the ground truth of call stacks from the guest's stack slots
// (truth_stacks.h), written per trace as OUT/cpuN.truth-G (G: the trigger's
// switch-off count, so 1 for the first trace) when the trigger goes off and
// at exit.
//
// trigger=PATH: trace only while PATH exists (polled every 20 ms), so that a
// test can trace a workload and not the boot.  Each time the trigger goes
// off, every vCPU ends its stream (pending TNT, open frames, TIP.PGD), writes
// it out and then creates OUT/cpuN.stopped: a reader has every byte of that
// trace once the marker exists.  A vCPU does so at its next block or when it
// next goes idle (a halted vCPU that sleeps through the switch is woken by a
// VM stop/cont, which makes every vCPU go idle).
// Kernel mode is told by address (>= 0xffff800000000000): the 7.2 API cannot
// read CPL.  TSC packets carry the host TSC (rdtsc) at PSB time.
//
// Hot path: one TB exec callback per executed block (user blocks only tell the
// encoder that user code ran), each vCPU thread touches only its own state and
// file.  Buffers are written when 256 KiB are full, when the vCPU idles, and at
// exit.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "classify.h"
#include "kthost_shared.h"
#include "pt_encoder.h"
#include "qemu_plugin_api.h"
#include "stale_int3.h"
#include "truth_stacks.h"

extern "C" {
QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;
}

namespace {

constexpr size_t kFlushBytes = 256u << 10;
constexpr size_t kGtFlushEntries = 32u << 10;

// Ground-truth data about one kernel instruction, built at translation time.
struct GtInsn {
  uint64_t address;
  uint64_t next;
  uint8_t accesses;  // memory callbacks a completed execution gives; 0: not checked (none, or a branch)
};

struct alignas(64) Vcpu {
  std::unique_ptr<ktpt::VcpuEncoder> encoder;
  int pt_fd = -1;
  int gt_fd = -1;
  bool tracing = false;
  bool write_failed = false;
  std::vector<uint64_t> gt;
  uint64_t gt_entries = 0;
  const GtInsn* gt_pending = nullptr;  // last recorded instruction that touches memory
  unsigned gt_mem_count = 0;           // ... and the memory callbacks it got so far
  uint64_t gt_faults = 0;              // recorded instructions removed as not retired
  uint64_t gt_int3 = 0;                // INT3s run (left out: PT shows them as an event at their address)
  uint32_t stopped_generation = 0;     // the last trigger-off this vCPU has confirmed
  std::unique_ptr<ktpt::TruthStacks> truth;  // truth=on
  bool iret_loaded = false;            // the current block's IRET reported its first load
  ktpt::StaleInt3Watch stale_int3;     // stuck on an INT3 that memory no longer holds (stale_int3.h)
  uint64_t stale_int3_stuck = 0;       // ... times seen stuck
  uint64_t code_flushes = 0;           // ... and the code-cache flushes that ended it
};

struct Config {
  std::string out_dir;
  std::string trigger;
  bool ground_truth = false;
  bool truth_stacks = false;
  ktpt::EncoderOptions options;
};

// Never destroyed: QEMU may run the plugin's exit callback after the C++
// destructors of a dlopen'ed library, with vCPU threads still alive.
Config& g_config = *new Config;
std::vector<Vcpu>& g_vcpus = *new std::vector<Vcpu>;
std::atomic<bool> g_enabled{true};
// Counts the trigger's switches from on to off; bumped before g_enabled goes
// false, so a vCPU that sees it false also sees the new generation.
std::atomic<uint32_t> g_off_generation{0};
std::atomic<bool> g_stop_poller{false};
std::thread* g_poller = nullptr;
const ktpt::Block& g_user_block = *new ktpt::Block;  // kernel == false
// truth=on: every kernel block by id (translation runs on several threads).
std::mutex& g_blocks_lock = *new std::mutex;
std::vector<const ktpt::Block*>& g_blocks = *new std::vector<const ktpt::Block*>;

qemu_plugin_id_t g_plugin_id = 0;
// A code-cache flush asked for and not yet done; the last one's time (steady ns).
std::atomic<bool> g_code_flush_pending{false};
std::atomic<int64_t> g_last_code_flush_ns{0};
// Flushes are spaced: 250 ms apart at first, the gap doubling (up to 16 s)
// while they come back to back and falling back after a quiet spell. Each
// flush makes QEMU translate again, and the plugin allocate again, every
// block that runs after it (tb_translate never frees a Block), so a guest
// stuck over and over, or one that loops on an INT3 on purpose, must not
// make it flush without end.
constexpr int64_t kCodeFlushGapMinNs = 250000000;
constexpr int64_t kCodeFlushGapMaxNs = 16000000000;
std::atomic<int64_t> g_code_flush_gap_ns{kCodeFlushGapMinNs};

uint64_t host_tsc(void*) { return __rdtsc(); }

void write_all(Vcpu& v, int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0 && !v.write_failed) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      v.write_failed = true;
      break;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// OUT/cpuN.pt and its siblings (kthost_shared.h: the file protocol kthost reads).
std::string output_path(unsigned index, const char* suffix) {
  return g_config.out_dir + "/" KTHOST_PT_FILE_PREFIX + std::to_string(index) + suffix;
}

int open_output(unsigned index, const char* suffix) {
  const std::string path = output_path(index, suffix);
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

void flush(Vcpu& v) {
  if (!v.encoder) return;
  std::vector<uint8_t>& out = v.encoder->output();
  if (!out.empty()) {
    write_all(v, v.pt_fd, out.data(), out.size());
    out.clear();
  }
  if (!v.gt.empty()) {
    write_all(v, v.gt_fd, v.gt.data(), v.gt.size() * sizeof(uint64_t));
    v.gt.clear();
  }
}

// IRETs a vCPU found no frame for, offered to the others (a handler that
// migrated): see ktpt::ResumeBoard.
ktpt::ResumeBoard& g_resume_board = *new ktpt::ResumeBoard;  // never destroyed, as g_vcpus

// Called on the vCPU's own thread, so no lock is needed.
Vcpu* vcpu_state(unsigned index) {
  if (index >= g_vcpus.size()) return nullptr;
  Vcpu& v = g_vcpus[index];
  if (!v.encoder) {
    v.encoder = std::make_unique<ktpt::VcpuEncoder>(g_config.options, host_tsc, nullptr);
    v.encoder->set_resume_board(&g_resume_board);
    v.pt_fd = open_output(index, KTHOST_PT_FILE_PACKETS);
    if (g_config.ground_truth) v.gt_fd = open_output(index, KTHOST_PT_FILE_GROUND_TRUTH);
    if (g_config.truth_stacks) v.truth = std::make_unique<ktpt::TruthStacks>();
    v.write_failed = v.pt_fd < 0 || (g_config.ground_truth && v.gt_fd < 0);
    v.gt.reserve(kGtFlushEntries);
  }
  return &v;
}

// OUT/cpuN.stopped: this vCPU's stream of the trace that just ended is all
// in OUT/cpuN.pt.  Holds the generation and the stream's size, for people.
void write_stopped_marker(unsigned index, uint32_t generation) {
  struct stat st {};
  const std::string pt = output_path(index, KTHOST_PT_FILE_PACKETS);
  const long long bytes = stat(pt.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
  const std::string path = output_path(index, KTHOST_PT_FILE_STOPPED);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "generation=%u\npt_bytes=%lld\n", generation, bytes);
  std::fclose(f);
}

// OUT/cpuN.truth-G: this trace's stack truth; then it starts afresh.
void write_truth(unsigned index, Vcpu& v, uint32_t generation) {
  if (!v.truth) return;
  const std::string path = output_path(index, ".truth-") + std::to_string(generation);
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::vector<const ktpt::Block*> blocks;
    {
      std::lock_guard<std::mutex> lock(g_blocks_lock);
      blocks = g_blocks;
    }
    v.truth->write(f, index, blocks);
    std::fclose(f);
  }
  v.truth->reset();
}

// Tracing is off: end this vCPU's stream, write it out, and confirm each
// switch-off once.  Only on the vCPU's own thread.
// `next`: the block the vCPU is about to run, where tracing stops before it
// (null when the vCPU went idle).
void settle_disabled(unsigned index, Vcpu& v, const ktpt::Block* next = nullptr) {
  if (v.tracing) {
    if (next) v.encoder->stop_before(*next);
    else v.encoder->stop();
    v.tracing = false;
    flush(v);
  }
  const uint32_t generation = g_off_generation.load(std::memory_order_acquire);
  if (v.stopped_generation != generation) {
    flush(v);
    write_truth(index, v, generation);
    v.stopped_generation = generation;
    write_stopped_marker(index, generation);
  }
}

void register_callbacks(qemu_plugin_id_t id);

// After qemu_plugin_reset: QEMU flushed its code cache and dropped every
// callback; the plugin's state is untouched.
void after_code_flush(qemu_plugin_id_t id) {
  register_callbacks(id);
  g_code_flush_pending.store(false, std::memory_order_release);
}

// The vCPU re-runs an INT3 that is gone from memory (stale_int3.h): flush
// QEMU's code cache, so that the address is translated from memory again.
// Cold and out of line: on_block, on every block, stays small.
[[gnu::noinline, gnu::cold]] void flush_stale_code(unsigned index, Vcpu& v) {
  ++v.stale_int3_stuck;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  const int64_t last = g_last_code_flush_ns.load(std::memory_order_relaxed);
  const int64_t gap = g_code_flush_gap_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < gap) return;  // stuck again soon: asked again at the next count
  bool idle = false;
  if (!g_code_flush_pending.compare_exchange_strong(idle, true)) return;
  const bool back_to_back = last != 0 && now - last < 4 * gap;
  g_code_flush_gap_ns.store(back_to_back ? std::min(2 * gap, kCodeFlushGapMaxNs) : kCodeFlushGapMinNs,
                            std::memory_order_relaxed);
  g_last_code_flush_ns.store(now, std::memory_order_relaxed);
  ++v.code_flushes;
  char line[160];
  std::snprintf(line, sizeof line,
                "ktpt: vCPU %u re-ran a stale INT3 at %#llx %u times (QEMU kept a translation older than the "
                "text); flushing the code cache\n",
                index, static_cast<unsigned long long>(v.stale_int3.stuck_at()), ktpt::StaleInt3Watch::kDefaultThreshold);
  qemu_plugin_outs(line);
  qemu_plugin_reset(g_plugin_id, after_code_flush);
}

// What the stale-INT3 watch needs of a block, told by the callback it was
// registered with (so that the block is not read when tracing is off).
enum class Watched : uint8_t { Plain, EndsInIret, LoneInt3 };

void on_block(unsigned index, const ktpt::Block& block, Watched watched = Watched::Plain) {
  Vcpu* v = vcpu_state(index);
  if (!v) return;
  if (watched == Watched::LoneInt3 && v->stale_int3.on_lone_int3(block.start)) flush_stale_code(index, *v);
  v->stale_int3.on_block(watched == Watched::EndsInIret);
  if (!g_enabled.load(std::memory_order_acquire)) {
    settle_disabled(index, *v, &block);
    return;
  }
  if (!v->tracing && v->truth) v->truth->reset();  // a new trace: nothing seen yet
  v->tracing = true;
  v->encoder->on_block(block);
  if (v->truth) {
    if (block.kernel) v->truth->on_kernel_block(block, block.id);
    else v->truth->on_user();
    v->iret_loaded = false;
  }
  if (v->encoder->output().size() >= kFlushBytes) flush(*v);
}

void kernel_tb_exec(unsigned index, void* userdata) {
  on_block(index, *static_cast<const ktpt::Block*>(userdata));
}

void user_tb_exec(unsigned index, void*) { on_block(index, g_user_block); }

// A kernel block that is one INT3 (watched by StaleInt3Watch).
void int3_tb_exec(unsigned index, void* userdata) {
  on_block(index, *static_cast<const ktpt::Block*>(userdata), Watched::LoneInt3);
}

// A kernel block that ends in an IRET (watched by StaleInt3Watch).
void iret_tb_exec(unsigned index, void* userdata) {
  on_block(index, *static_cast<const ktpt::Block*>(userdata), Watched::EndsInIret);
}

// A block that is one REP string instruction: QEMU runs each iteration as a
// block of its own, and most of a guest's blocks are these (a clear_page is
// 512). The iterations after the first take the short way: no packet, no
// frame, no flush, nothing to settle (the next other block does that).
void rep_tb_exec(unsigned index, void* userdata) {
  if (index < g_vcpus.size()) {
    Vcpu& v = g_vcpus[index];
    const auto& block = *static_cast<const ktpt::Block*>(userdata);
    if (v.tracing && g_enabled.load(std::memory_order_relaxed) && v.encoder->is_rep_repeat(block) &&
        (!v.truth || v.truth->is_rep_repeat(block))) {
      v.encoder->take_rep_repeat(block);
      if (v.truth) v.truth->take_rep_repeat(block);
      v.iret_loaded = false;
      return;
    }
  }
  kernel_tb_exec(index, userdata);
}

// An instruction callback fires before the instruction runs, so a faulting
// instruction looks executed.  A memory callback fires only after an access
// succeeded: an instruction that got fewer memory callbacks than it makes
// accesses, and was followed by something other than its fallthrough (or a
// re-run of itself), faulted.  PT marks it
// as not retired (FUP at it), so the ground truth drops it too.
void gt_settle_pending(Vcpu& v, uint64_t now) {
  const GtInsn* p = v.gt_pending;
  v.gt_pending = nullptr;
  if (!p || v.gt_mem_count >= p->accesses || now == p->next || now == p->address) return;
  if (!v.gt.empty() && v.gt.back() == p->address) {
    v.gt.pop_back();
    --v.gt_entries;
    ++v.gt_faults;
  }
}

void record_gt(Vcpu& v, const GtInsn* insn, bool rep) {
  gt_settle_pending(v, insn->address);
  // QEMU re-enters a REP string instruction once per iteration; PT shows it once.
  const bool repeat = rep && !v.gt.empty() && v.gt.back() == insn->address;
  if (!repeat) {
    v.gt.push_back(insn->address);
    ++v.gt_entries;
  }
  if (insn->accesses) {
    v.gt_pending = insn;
    v.gt_mem_count = 0;
  }
  if (v.gt.size() >= kGtFlushEntries) flush(v);
}

void gt_insn_exec(unsigned index, void* userdata) {
  if (index >= g_vcpus.size() || !g_vcpus[index].tracing) return;
  record_gt(g_vcpus[index], static_cast<const GtInsn*>(userdata), false);
}

void gt_rep_insn_exec(unsigned index, void* userdata) {
  if (index >= g_vcpus.size() || !g_vcpus[index].tracing) return;
  record_gt(g_vcpus[index], static_cast<const GtInsn*>(userdata), true);
}

// An INT3 (a breakpoint, or text_poke_bp's byte while a site is rewritten)
// traps to its handler; the encoder shows it as an event at its own address,
// as for a fault, so it is not a retired instruction in the ground truth
// either. Under TCG a poke's INT3 can stay in place for thousands of hits.
void gt_int3_exec(unsigned index, void* address) {
  if (index >= g_vcpus.size() || !g_vcpus[index].tracing) return;
  Vcpu& v = g_vcpus[index];
  gt_settle_pending(v, reinterpret_cast<uintptr_t>(address));
  ++v.gt_int3;
}

void gt_mem_access(unsigned index, qemu_plugin_meminfo_t, uint64_t, void*) {
  if (index < g_vcpus.size()) ++g_vcpus[index].gt_mem_count;
}

// truth=on: the memory accesses of a kernel block's last instruction when it
// is a call, return or IRET: the slot of the frame it pushes or pops.
void truth_mem_access(unsigned index, qemu_plugin_meminfo_t info, uint64_t vaddr, void* userdata) {
  if (index >= g_vcpus.size()) return;
  Vcpu& v = g_vcpus[index];
  if (!v.tracing || !v.truth) return;
  const auto* b = static_cast<const ktpt::Block*>(userdata);
  const bool store = qemu_plugin_mem_is_store(info);
  if (store) {
    if (b->end == ktpt::EndKind::DirectCall || b->end == ktpt::EndKind::Indirect) v.truth->on_call(vaddr, b->next);
  } else if (b->end == ktpt::EndKind::Return) {
    v.truth->on_return(vaddr);
  } else if (b->end == ktpt::EndKind::Iret && !v.iret_loaded) {
    v.iret_loaded = true;  // RIP is popped first
    v.truth->on_iret(vaddr);
  }
}

void tb_translate(qemu_plugin_id_t, struct qemu_plugin_tb* tb) {
  const size_t n = qemu_plugin_tb_n_insns(tb);
  const uint64_t start = qemu_plugin_tb_vaddr(tb);
  if (n == 0) return;
  if (!ktpt::is_kernel_address(start)) {
    qemu_plugin_register_vcpu_tb_exec_cb(tb, user_tb_exec, QEMU_PLUGIN_CB_NO_REGS, nullptr);
    return;
  }
  // Never freed: a vCPU's encoder keeps a pointer to the last block it ran,
  // and QEMU may drop the TB (tb_flush) while that pointer is live.
  auto* block = new ktpt::Block;
  block->start = start;
  block->kernel = true;
  block->n_insns = static_cast<uint32_t>(n);
  block->insn_offsets.reserve(n);
  bool lone_int3 = false;
  for (size_t i = 0; i < n; ++i) {
    struct qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    const uint64_t address = qemu_plugin_insn_vaddr(insn);
    const size_t size = qemu_plugin_insn_size(insn);
    const auto* bytes = static_cast<const uint8_t*>(qemu_plugin_insn_data(insn));
    block->insn_offsets.push_back(static_cast<uint16_t>(address - start));
    if (i == 0) lone_int3 = ktpt::is_lone_int3(bytes, size, n);
    if (i + 1 == n) {
      const ktpt::EndClass c = ktpt::classify_instruction(bytes, size, address);
      block->last = address;
      block->next = address + size;
      block->end = c.kind;
      block->target = c.target;
      const bool moves_a_frame = c.kind == ktpt::EndKind::DirectCall || c.kind == ktpt::EndKind::Indirect ||
                                 c.kind == ktpt::EndKind::Return || c.kind == ktpt::EndKind::Iret;
      if (g_config.truth_stacks && moves_a_frame)
        qemu_plugin_register_vcpu_mem_cb(insn, truth_mem_access, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, block);
    }
    if (g_config.ground_truth) {
      const ktpt::InsnFacts facts = ktpt::instruction_facts(bytes, size);
      if (size == 1 && bytes[0] == 0xcc) {
        qemu_plugin_register_vcpu_insn_exec_cb(insn, gt_int3_exec, QEMU_PLUGIN_CB_NO_REGS,
                                               reinterpret_cast<void*>(static_cast<uintptr_t>(address)));
        continue;
      }
      auto* gt = new GtInsn{address, address + size, facts.branch ? uint8_t{0} : facts.memory_accesses};
      qemu_plugin_register_vcpu_insn_exec_cb(insn, facts.rep_string ? gt_rep_insn_exec : gt_insn_exec,
                                             QEMU_PLUGIN_CB_NO_REGS, gt);
      if (gt->accesses) {
        qemu_plugin_register_vcpu_mem_cb(insn, gt_mem_access, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
                                         nullptr);
      }
    }
  }
  if (g_config.truth_stacks) {
    std::lock_guard<std::mutex> lock(g_blocks_lock);
    block->id = static_cast<uint32_t>(g_blocks.size());
    g_blocks.push_back(block);
  }
  const bool rep_alone = n == 1 && block->end == ktpt::EndKind::Rep;
  qemu_plugin_vcpu_udata_cb_t exec = kernel_tb_exec;
  if (rep_alone) exec = rep_tb_exec;
  else if (lone_int3) exec = int3_tb_exec;
  else if (block->end == ktpt::EndKind::Iret) exec = iret_tb_exec;
  qemu_plugin_register_vcpu_tb_exec_cb(tb, exec, QEMU_PLUGIN_CB_NO_REGS, block);
}

void vcpu_idle(qemu_plugin_id_t, unsigned index) {
  Vcpu* v = vcpu_state(index);
  if (!v) return;
  if (!g_enabled.load(std::memory_order_acquire)) {
    settle_disabled(index, *v);
  } else {
    v->encoder->note_idle();  // the time after the wakeup: a TSC at the next kernel block
    flush(*v);
  }
}

void write_stats(unsigned index, const Vcpu& v) {
  const std::string path = output_path(index, KTHOST_PT_FILE_STATS);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  const ktpt::EncoderStats& s = v.encoder->stats();
  struct stat st {};
  const std::string pt = output_path(index, KTHOST_PT_FILE_PACKETS);
  const long long pt_bytes = stat(pt.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
  std::fprintf(f,
               "pt_bytes=%lld\nkernel_blocks=%llu\nrep_repeats=%llu\nkernel_insns=%llu\ngt_entries=%llu\nevents=%llu\n"
               "resolved_async=%llu\nresolved_fault=%llu\nunseen_user=%llu\noverflows=%llu\npsbs=%llu\nidle_tscs=%llu\nenables=%llu\n"
               "disables=%llu\nencode_errors=%llu\nwrite_failed=%d\ngt_faults_removed=%llu\ngt_int3_left_out=%llu\n"
               "stale_int3_stuck=%llu\ncode_flushes=%llu\nentries_learned=%llu\nentries_refused=%llu\n"
               "orphan_irets=%llu\nresolved_elsewhere=%llu\nresume_posts_dropped=%llu\nresume_posts_unfit=%llu\n"
               "stops_at_block=%llu\n",
               pt_bytes, static_cast<unsigned long long>(s.kernel_blocks), static_cast<unsigned long long>(s.rep_repeats),
               static_cast<unsigned long long>(s.kernel_insns), static_cast<unsigned long long>(v.gt_entries),
               static_cast<unsigned long long>(s.events), static_cast<unsigned long long>(s.resolved_async),
               static_cast<unsigned long long>(s.resolved_fault), static_cast<unsigned long long>(s.unseen_user),
               static_cast<unsigned long long>(s.overflows),
               static_cast<unsigned long long>(s.psbs), static_cast<unsigned long long>(s.idle_tscs),
               static_cast<unsigned long long>(s.enables),
               static_cast<unsigned long long>(s.disables), static_cast<unsigned long long>(s.encode_errors),
               v.write_failed ? 1 : 0, static_cast<unsigned long long>(v.gt_faults),
               static_cast<unsigned long long>(v.gt_int3), static_cast<unsigned long long>(v.stale_int3_stuck),
               static_cast<unsigned long long>(v.code_flushes), static_cast<unsigned long long>(s.entries_learned),
               static_cast<unsigned long long>(s.entries_refused), static_cast<unsigned long long>(s.orphan_irets),
               static_cast<unsigned long long>(s.resolved_elsewhere),
               static_cast<unsigned long long>(g_resume_board.dropped()),
               static_cast<unsigned long long>(g_resume_board.unfit()),
               static_cast<unsigned long long>(s.stops_at_block));
  std::fclose(f);

}

void at_exit(qemu_plugin_id_t, void*) {
  g_stop_poller.store(true);
  if (g_poller && g_poller->joinable()) g_poller->join();
  for (unsigned i = 0; i < g_vcpus.size(); ++i) {
    Vcpu& v = g_vcpus[i];
    if (!v.encoder) continue;
    v.encoder->stop();
    flush(v);
    if (v.pt_fd >= 0) close(v.pt_fd);
    if (v.gt_fd >= 0) close(v.gt_fd);
    write_stats(i, v);
    if (v.tracing) write_truth(i, v, g_off_generation.load() + 1);
    write_stopped_marker(i, g_off_generation.load());
  }
  qemu_plugin_outs("ktpt: trace written\n");
}

// The trigger is on while its file exists. When the file holds a process id
// (kthost trace writes its own), it is on only while that process lives: a
// tracer that is killed cannot leave the guest traced (and its files
// growing) forever; the stale trigger is removed. A tracer outside our pid
// namespace (an agent reaching a pod's QEMU) has no pid here: it writes
// KTHOST_PT_TRIGGER_HEARTBEAT and keeps the file's mtime fresh instead.
bool trigger_on() {
  int fd = open(g_config.trigger.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[32] = {};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  struct stat st {};
  const bool stated = fstat(fd, &st) == 0;
  close(fd);
  if (n <= 0) return true;
  if (std::strncmp(buf, KTHOST_PT_TRIGGER_HEARTBEAT, sizeof KTHOST_PT_TRIGGER_HEARTBEAT - 1) == 0) {
    // A tracer in another pid namespace: alive while it keeps touching the trigger.
    timespec now {};
    clock_gettime(CLOCK_REALTIME, &now);
    if (!stated || now.tv_sec - st.st_mtim.tv_sec <= KTHOST_PT_TRIGGER_HEARTBEAT_S) return true;
    unlink(g_config.trigger.c_str());
    qemu_plugin_outs("ktpt: the tracer that switched PT on stopped touching its trigger; PT off\n");
    return false;
  }
  char* end = nullptr;
  long pid = strtol(buf, &end, 10);
  if (pid <= 0 || end == buf) return true;
  if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) return true;
  unlink(g_config.trigger.c_str());
  qemu_plugin_outs("ktpt: the tracer that switched PT on is gone; PT off\n");
  return false;
}

// OUT/started: PT is on; every block a vCPU starts from now is traced.
// Kept while the trigger is on (a reader removes it before switching on).
void confirm_started() {
  const std::string path = g_config.out_dir + "/" KTHOST_PT_FILE_STARTED;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) return;
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "off_generation=%u\n", g_off_generation.load());
    std::fclose(f);
  }
}

void poll_trigger() {
  while (!g_stop_poller.load()) {
    const bool on = trigger_on();
    if (!on && g_enabled.load(std::memory_order_relaxed))
      g_off_generation.fetch_add(1, std::memory_order_release);
    g_enabled.store(on, std::memory_order_release);
    if (on) confirm_started();
    std::this_thread::sleep_for(std::chrono::milliseconds(KTHOST_PT_TRIGGER_POLL_MS));
  }
}

void register_callbacks(qemu_plugin_id_t id) {
  qemu_plugin_register_vcpu_tb_trans_cb(id, tb_translate);
  qemu_plugin_register_vcpu_idle_cb(id, vcpu_idle);
  qemu_plugin_register_atexit_cb(id, at_exit, nullptr);
}

bool parse_args(int argc, char** argv, std::string& error) {
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "out") {
      g_config.out_dir = value;
    } else if (key == "gt") {
      g_config.ground_truth = value == "on" || value == "true" || value == "1";
    } else if (key == "truth") {
      g_config.truth_stacks = value == "on" || value == "true" || value == "1";
    } else if (key == "trigger") {
      g_config.trigger = value;
    } else if (key == "psb" || key == "defer") {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(value.c_str(), &end, 0);
      if (value.empty() || *end != '\0' || n < 64 || n > (1ull << 32)) {
        error = "bad " + key + "=" + value;
        return false;
      }
      if (key == "psb") g_config.options.psb_interval = static_cast<uint32_t>(n);
      else g_config.options.deferred_limit = static_cast<size_t>(n);
    } else {
      error = "unknown argument " + arg + " (out=DIR, gt=on, truth=on, psb=BYTES, trigger=PATH, defer=BYTES)";
      return false;
    }
  }
  if (g_config.out_dir.empty()) {
    error = "out=DIR is required";
    return false;
  }
  return true;
}

}  // namespace

extern "C" QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t* info, int argc,
                                                      char** argv) {
  std::string error;
  if (!info->system_emulation || std::strcmp(info->target_name, "x86_64") != 0) {
    qemu_plugin_outs("ktpt: needs qemu-system-x86_64\n");
    return -1;
  }
  if (!parse_args(argc, argv, error)) {
    qemu_plugin_outs(("ktpt: " + error + "\n").c_str());
    return -1;
  }
  if (mkdir(g_config.out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    qemu_plugin_outs(("ktpt: cannot create " + g_config.out_dir + ": " + std::strerror(errno) + "\n").c_str());
    return -1;
  }
  const int max_vcpus = info->system.max_vcpus > 0 ? info->system.max_vcpus : 1;
  g_vcpus = std::vector<Vcpu>(static_cast<size_t>(max_vcpus));
  if (!g_config.trigger.empty()) {
    g_enabled.store(trigger_on());
    g_poller = new std::thread(poll_trigger);
  }
  g_plugin_id = id;
  register_callbacks(id);
  return 0;
}
