// TruthStacks: call stacks from the guest's stack slots (see truth_stacks.h).
#include "truth_stacks.h"

#include <cinttypes>

namespace ktpt {

TruthStacks::TruthStacks(size_t max_nodes) : max_nodes_(max_nodes) { reset(); }

void TruthStacks::reset() {
  counts_.clear();
  edges_.clear();
  struck_after_.clear();
  // No frame refers to a node once the regions are gone (below): each trace
  // numbers its stacks afresh, in bounded memory.
  nodes_.clear();
  children_.clear();
  nodes_.push_back({kEmpty, 0, false});        // kEmpty
  nodes_.push_back({kBaseUnknown, 0, false});  // kBaseUnknown
  full_ = false;
  // Between traces the guest ran unobserved: every stack is unknown again.
  regions_.clear();
  regions_[0].base = kBaseUnknown;
  current_ = 0;
  prev_ = nullptr;
  from_user_ = false;
  prev_called_ = false;
  resume_ = 0;
  moved_return_ = kNone;
  unseen_call_returns_ = 0;
}

uint32_t TruthStacks::top() const {
  auto it = regions_.find(current_);
  if (it == regions_.end()) return kBaseUnknown;
  const Region& r = it->second;
  return r.frames.empty() ? r.base : r.frames.back().node;
}

uint32_t TruthStacks::intern(uint32_t parent, uint64_t ret) {
  const uint64_t key = (ret * 0x9E3779B97F4A7C15ull) ^ parent;
  auto range = children_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) {
    const Node& n = nodes_[it->second];
    if (n.parent == parent && n.ret == ret && !n.interrupt) return it->second;
  }
  nodes_.push_back({parent, ret, false});
  const uint32_t id = static_cast<uint32_t>(nodes_.size() - 1);
  children_.emplace(key, id);
  return id;
}

bool TruthStacks::is_expected(const Block& p, uint64_t s) const {
  if (s != p.start && p.contains_insn(s)) return true;  // the rest of a block QEMU cut short
  switch (p.end) {
    case EndKind::Fallthrough: return s == p.next;
    case EndKind::Cond: return s == p.target || s == p.next;
    case EndKind::DirectJmp:
    case EndKind::DirectCall: return s == p.target;
    case EndKind::Indirect:
    case EndKind::Return: return handlers_.count(s) == 0;
    case EndKind::Iret:
    case EndKind::ToUser: return true;
    case EndKind::SoftInt: return false;
    case EndKind::Halt: return s == p.next;
    case EndKind::Rep: return s == p.last || s == p.next;
  }
  return true;
}

void TruthStacks::on_user() {
  from_user_ = true;
  prev_ = nullptr;
  resume_ = 0;
}

void TruthStacks::on_kernel_block(const Block& b, uint32_t block_id) {
  if (nodes_.size() >= max_nodes_) full_ = true;
  if (full_) return;
  if (from_user_) {
    // A kernel entry: an empty stack, placed in its region at its first slot.
    regions_[0] = Region{};
    current_ = 0;
    handlers_.insert(b.start);
    from_user_ = false;
    moved_return_ = kNone;
  } else if (prev_) {
    const Block& p = *prev_;
    if (moved_return_ != kNone) resolve_moved_return(p, b.start);
    // How the last block's branch went (none for an IRET or straight code).
    const bool branch = p.end == EndKind::DirectCall || p.end == EndKind::Indirect || p.end == EndKind::DirectJmp ||
                        p.end == EndKind::Return;
    const Transition t = p.end == EndKind::DirectCall || (p.end == EndKind::Indirect && prev_called_) ? Transition::Call
                         : p.end == EndKind::Return                                                 ? Transition::Return
                                                                                                    : Transition::Jump;
    if (resume_ != 0) {
      nodes_[resume_].ret = b.start;
      auto it = struck_after_.find(resume_);
      if (it != struck_after_.end()) {
        edges_[{it->second.from, b.start, it->second.t}]++;  // the branch the interrupt came after
        struck_after_.erase(it);
      }
      resume_ = 0;
    } else if (!is_expected(p, b.start)) {
      handlers_.insert(b.start);
      const uint32_t parent = top();
      nodes_.push_back({parent, 0, true});
      const uint32_t irq = static_cast<uint32_t>(nodes_.size() - 1);
      regions_[current_].frames.push_back({0, irq});
      if (branch) struck_after_[irq] = {p.last, t};
    } else if (branch) {
      edges_[{p.last, b.start, t}]++;
    }
  }
  const bool rep_repeat = prev_ && prev_->end == EndKind::Rep && b.start == prev_->last;
  if (!rep_repeat) counts_[(uint64_t{top()} << 32) | block_id]++;
  prev_ = &b;
  prev_called_ = false;
}

// The return on_return left open went to `target`: to the top frame's
// return address, it was that frame's (error_entry); elsewhere, an unseen
// call's, and the top frame stays. An interrupt before the target ran hides
// it: taken as the top frame's, as a return from below it mostly is.
void TruthStacks::resolve_moved_return(const Block& p, uint64_t target) {
  auto it = regions_.find(moved_return_);
  moved_return_ = kNone;
  if (it == regions_.end() || it->second.frames.empty() || it->second.frames.back().slot == 0) return;
  auto& frames = it->second.frames;
  if (!is_expected(p, target) || nodes_[frames.back().node].ret == target) {
    frames.pop_back();
  } else {
    ++unseen_call_returns_;
  }
}

TruthStacks::Region& TruthStacks::step_onto(uint64_t slot, bool by_call) {
  const uint64_t key = region_of(slot);
  if (current_ == 0) {
    // The stack not yet placed is this region's.
    Region placed = std::move(regions_[0]);
    regions_.erase(0);
    Region& r = regions_[key];
    r = std::move(placed);
    r.below = 0;
    current_ = key;
    return r;
  }
  if (key == current_) return regions_[key];
  for (uint64_t k = regions_[current_].below; k != 0;) {
    if (k == key) {  // back down onto a region this one stacks on
      current_ = key;
      return regions_[key];
    }
    auto it = regions_.find(k);
    k = it == regions_.end() ? 0 : it->second.below;
  }
  const uint32_t here = top();
  auto [it, fresh] = regions_.try_emplace(key);
  Region& r = it->second;
  // A first call at the top of a stack's page stacks it on this one: the
  // IRQ stack (call_on_irqstack calls 16 bytes below its top), or the task
  // stack the entry code moves to from the entry stack (right below pt_regs).
  // A first call deeper down is a task switch's (__switch_to_asm's return
  // stack stuffing on the next task's stack). In one main job such calls
  // came at page offsets ff0 (11.5 k), f50 (4.9 k) and mostly elsewhere
  // below f00 (10 k); taken as stacked, the switched-to task's frames went
  // on top of the previous task's.
  if (by_call && r.frames.empty() && (slot & 0xfff) >= kStackTopSlots) {
    r.base = here;
    r.below = current_;
  } else {
    r.below = 0;  // a task switch: that task's own frames
    if (fresh) r.base = kBaseUnknown;
  }
  current_ = key;
  return r;
}

void TruthStacks::on_call(uint64_t slot, uint64_t return_address) {
  if (full_) return;
  Region& r = step_onto(slot, true);
  while (!r.frames.empty() && r.frames.back().slot != 0 && r.frames.back().slot <= slot) r.frames.pop_back();
  const uint32_t n = intern(top(), return_address);
  r.frames.push_back({slot, n});
  prev_called_ = true;
}

void TruthStacks::on_return(uint64_t slot) {
  if (full_) return;
  Region& r = step_onto(slot, false);
  bool popped = false, matched = false;
  while (!r.frames.empty() && r.frames.back().slot != 0 && r.frames.back().slot < slot) {
    r.frames.pop_back();
    popped = true;
  }
  if (!r.frames.empty() && r.frames.back().slot == slot) {
    r.frames.pop_back();
    matched = true;
  } else if (!popped && !r.frames.empty() && r.frames.back().slot != 0) {
    // From below the top frame's slot: either error_entry, which moves its
    // return address down and returns from there (to the top frame's return
    // address), or the return of a call the truth did not see (an INT3
    // handler that emulates a call pushes the return address itself). The
    // next block tells which: resolve_moved_return.
    moved_return_ = current_;
    return;
  }
  if (!matched && r.frames.empty()) {
    r.base = kBaseUnknown;  // returned below everything seen on this stack
    r.below = 0;
  }
}

void TruthStacks::on_iret(uint64_t slot) {
  if (full_) return;
  Region& r = step_onto(slot, false);
  size_t i = r.frames.size();
  while (i > 0 && r.frames[i - 1].slot != 0) --i;
  if (i > 0) {
    resume_ = r.frames[i - 1].node;
    r.frames.resize(i - 1);
    return;
  }
  while (!r.frames.empty() && r.frames.back().slot < slot) r.frames.pop_back();  // an interrupt not seen
}

uint64_t TruthStacks::count(uint32_t node, uint32_t block_id) const {
  auto it = counts_.find((uint64_t{node} << 32) | block_id);
  return it == counts_.end() ? 0 : it->second;
}

uint64_t TruthStacks::transitions(uint64_t from_last, uint64_t to, Transition t) const {
  auto it = edges_.find({from_last, to, t});
  return it == edges_.end() ? 0 : it->second;
}

// Text, one record per line (tests/tools/check-stacks.py reads it):
//   ktpt-truth 1 cpu N
//   n ID PARENT c|i RET        nodes 2.. (0: empty stack, 1: base unknown)
//   b ID START OFF,OFF,...     blocks that ran (instruction offsets)
//   c NODE BLOCK N             block BLOCK ran N times on stack NODE
//   e FROM TO call|jump|return N
//   incomplete N               the node limit was reached: counts stop there
//   end
void TruthStacks::write(std::FILE* out, unsigned cpu, const std::vector<const Block*>& blocks) {
  std::fprintf(out, "ktpt-truth 1 cpu %u\n", cpu);
  for (uint32_t i = 2; i < nodes_.size(); ++i)
    std::fprintf(out, "n %u %u %c %" PRIx64 "\n", i, nodes_[i].parent, nodes_[i].interrupt ? 'i' : 'c', nodes_[i].ret);
  std::unordered_set<uint32_t> used;
  for (const auto& [key, n] : counts_) used.insert(static_cast<uint32_t>(key));
  for (uint32_t id : used) {
    if (id >= blocks.size() || !blocks[id]) continue;
    const Block& b = *blocks[id];
    std::fprintf(out, "b %u %" PRIx64 " ", id, b.start);
    for (size_t k = 0; k < b.insn_offsets.size(); ++k) std::fprintf(out, k ? ",%u" : "%u", b.insn_offsets[k]);
    std::fputc('\n', out);
  }
  for (const auto& [key, n] : counts_)
    std::fprintf(out, "c %u %u %" PRIu64 "\n", static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key), n);
  static const char* const kNames[] = {"call", "jump", "return"};
  for (const auto& [e, n] : edges_)
    std::fprintf(out, "e %" PRIx64 " %" PRIx64 " %s %" PRIu64 "\n", e.from, e.to, kNames[static_cast<int>(e.t)], n);
  std::fprintf(out, "unseen_call_returns %" PRIu64 "\n", unseen_call_returns_);
  if (full_) std::fprintf(out, "incomplete %zu nodes\n", nodes_.size());
  std::fputs("end\n", out);
}

}  // namespace ktpt
