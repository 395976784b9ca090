#include "piece_walk.h"

#include <algorithm>

#include "kthost/decode/symbolizer.h"

namespace kt {

uint32_t CallTree::child(uint32_t parent, uint32_t fn) {
  if (nodes_[parent].depth >= 256) parent = nodes_[parent].parent;  // bounded stacks: replace the top
  const uint64_t key = (uint64_t{parent} << 32) | fn;
  Recent& recent = recent_[((key * 0x9E3779B97F4A7C15ull) >> 40) & (kRecentSlots - 1)];
  if (recent.key == key) return recent.node;
  auto [it, fresh] = children_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (fresh) {
    uint32_t marker = parent == 0 ? ((fn & kStackMarker) && fn != UINT32_MAX ? fn : 0) : nodes_[parent].marker;
    nodes_.push_back({parent, fn, nodes_[parent].depth + 1, marker});
  }
  recent = {key, it->second};
  return it->second;
}

void CallTree::path_of(uint32_t node, std::vector<uint32_t>& path) const {
  path.clear();
  for (uint32_t x = node; x != 0; x = nodes_[x].parent) path.push_back(nodes_[x].fn);
  std::reverse(path.begin(), path.end());
}

FunctionKind function_kind_of(const std::string& name) {
  for (const char* thunk : {"__x86_indirect_thunk_", "__x86_indirect_call_thunk_", "__x86_indirect_jump_thunk_",
                            "__x86_indirect_its_thunk_"})
    if (name.rfind(thunk, 0) == 0) return kFnThunk;
  if (name == "__switch_to_asm" || name == "__switch_to") return kFnTaskSwitch;
  if (is_event_entry(name)) return kFnEventEntry;
  return kFnPlain;
}

bool is_event_entry(const std::string& name) {
  for (const char* prefix : {"asm_exc_", "asm_sysvec_", "asm_common_interrupt", "asm_spurious_interrupt",
                             "irq_entries_start", "spurious_entries_start", "entry_SYSCALL", "entry_INT80"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

uint32_t PieceWalk::root_for(uint32_t fn) {
  if (reset_) return base_known_ ? tree_.child(0, fn) : tree_.child(tree_.child(0, base_unknown_), fn);
  return tree_.child(tree_.child(0, stack_marker(segment_, underflows_)), fn);
}

void PieceWalk::reset_stack(bool base_known) {
  cur_ = 0;
  reset_ = true;
  base_known_ = base_known;
  pending_ = Pending::None;
  far_return_ = false;
  thunk_node_ = 0;
  n_interrupted_thunks_ = 0;
  switch_depth_ = 0;
}

void PieceWalk::on_time(uint64_t time) {
  if (time > now_) {
    s_.time_marks.push_back({time, static_cast<uint32_t>(s_.switch_out.size()), s_.gap_since_mark});
    s_.gap_since_mark = false;
    now_ = time;
    time_uncertain_ = false;
  }
}

void PieceWalk::on_overflow() {
  s_.gap_since_mark = true;
  reset_stack(false);
  leader_ = true;
  time_uncertain_ = true;  // until a later time arrives
}

void PieceWalk::on_tracing_changed() {
  reset_stack(true);
  leader_ = true;
}

void PieceWalk::on_interrupt(const Place& from) {
  // The call, return or jump the last block ended with took effect: the
  // interrupt struck at its destination, and the handler goes on top of it.
  if (cur_ != 0 || pending_ == Pending::Push || !reset_) move(from);
  if (thunk_node_ != 0 && cur_ == thunk_node_) {
    if (n_interrupted_thunks_ == kMaxInterruptedThunks) {
      std::move(interrupted_thunks_.begin() + 1, interrupted_thunks_.end(), interrupted_thunks_.begin());
      --n_interrupted_thunks_;
    }
    interrupted_thunks_[n_interrupted_thunks_++] = {thunk_node_, thunk_from_, thunk_called_};
  }
  pending_ = Pending::Push;
  leader_ = true;
}

DecodeErrorKind PieceWalk::on_error(DecodeErrorKind kind) {
  s_.gap_since_mark = true;
  reset_stack(false);
  return kind == DecodeErrorKind::NoText && time_uncertain_ ? DecodeErrorKind::Overflow : kind;
}

void PieceWalk::count(uint32_t fn, uint32_t ninsn) {
  if (s_.fn_insns[fn] == 0 && s_.fn_calls[fn] == 0) s_.fn_touched.push_back(fn);
  s_.fn_insns[fn] += ninsn;
  if (s_.node_insns.size() < tree_.size()) s_.node_insns.resize(tree_.size(), 0);
  if (s_.node_insns[cur_] == 0) s_.node_touched.push_back(cur_);
  s_.node_insns[cur_] += ninsn;
  s_.insns += ninsn;
  s_.blocks++;
}

uint32_t PieceWalk::function_of(uint32_t node) const {
  const bool known = node != 0 && !tree_.is_root(node) && !is_unknown_base(node);
  return known ? tree_.node(node).fn : Symbolizer::kUnknown;
}

void PieceWalk::count_call(uint32_t caller, uint32_t fn) {
  s_.edges[(uint64_t{caller} << 32) | fn]++;
  if (s_.fn_insns[fn] == 0 && s_.fn_calls[fn] == 0) s_.fn_touched.push_back(fn);
  s_.fn_calls[fn]++;
}

void PieceWalk::move(const Place& b) {
  const uint32_t f = b.fn;
  if (cur_ == 0 && !reset_ && !landed_) {
    landed_ = true;
    first_fn_ = f;
    first_at_entry_ = b.at_entry;
    first_event_entry_ = b.kind == kFnEventEntry;
  }
  // A call into its own function but not to its entry is no call: return
  // stack buffer stuffing (FILL_RETURN_BUFFER in __switch_to_asm and the
  // entry code, the retpoline's inner call) calls the next instruction and
  // never returns, so a frame for it would never be popped.
  if (pending_ == Pending::Call && cur_ != 0 && f == tree_.node(cur_).fn && f != Symbolizer::kUnknown && !b.at_entry)
    pending_ = Pending::None;
  // Leaving a thunk, by its indirect jump or its retpoline return: the
  // frame is the destination's, and so is the call that opened it.
  // A thunk a function jumped to is left the same way: a tail call when it
  // enters the destination at its entry. An interrupt that struck in the
  // thunk is not where it goes: its handler stands on the thunk's frame.
  if (thunk_node_ != 0 && cur_ == thunk_node_ && f != tree_.node(cur_).fn && pending_ != Pending::Push) {
    const uint32_t below = tree_.node(cur_).parent;
    if (thunk_called_) count_call(function_of(below), f);
    else if (b.at_entry) count_call(thunk_from_, f);  // a tail call through the thunk
    cur_ = tree_.child(below, f);
    thunk_node_ = 0;
    pending_ = Pending::None;
    return;
  }
  const uint32_t depth = cur_ == 0 ? 0 : tree_.node(cur_).depth;
  if (pending_ == Pending::Call) {
    if (b.kind == kFnThunk) {
      cur_ = cur_ == 0 ? root_for(f) : tree_.child(cur_, f);
      thunk_node_ = cur_;  // the call is counted when the thunk is left
      thunk_called_ = true;
    } else {
      count_call(function_of(cur_), f);
      cur_ = cur_ == 0 ? root_for(f) : tree_.child(cur_, f);
    }
    if (b.kind == kFnTaskSwitch) switch_depth_ = tree_.node(cur_).depth;
  } else if (pending_ == Pending::Push) {
    cur_ = cur_ == 0 ? root_for(f) : tree_.child(cur_, f);
  } else if (cur_ == 0) {
    cur_ = root_for(f);
  } else if (pending_ == Pending::Return && switch_depth_ != 0 && depth <= switch_depth_) {
    // The return out of the task switch runs on the next task's stack: what
    // stays below the switch's frame is the stack of the task that left.
    uint32_t out = cur_;
    while (out != 0 && tree_.node(out).depth >= switch_depth_) out = tree_.node(out).parent;
    s_.switch_out.push_back(out);
    switch_depth_ = 0;
    thunk_node_ = 0;
    if (s_.switch_out.size() <= kMaxSwitchSegments) {
      segment_ = static_cast<uint32_t>(s_.switch_out.size());
      underflows_ = 0;
      reset_ = false;
      cur_ = root_for(f);
    } else {
      cur_ = tree_.child(tree_.child(0, base_unknown_), f);
    }
  } else if (pending_ == Pending::Return && b.after_last) {
    // An IRET to the instruction after it serializes (sync_core()); it
    // returns from no call. Taken as a return it would pop the caller's
    // frame (do_sync_core lost on_each_cpu_cond_mask under every
    // text_poke_bp_batch spin that followed it).
  } else if (pending_ == Pending::Return) {
    uint32_t p = tree_.node(cur_).parent;
    if (is_unknown_base(p)) {
      cur_ = tree_.child(p, f);  // below a [base unknown]: nothing to pop
    } else if (tree_.is_root(p)) {
      if (!reset_) ++underflows_;  // returned below where the piece began
      cur_ = root_for(f);
    } else if (tree_.node(p).fn == f) {
      cur_ = p;
      if (n_interrupted_thunks_ > 0 && interrupted_thunks_[n_interrupted_thunks_ - 1].node == p) {
        const ThunkState& t = interrupted_thunks_[--n_interrupted_thunks_];
        thunk_node_ = t.node;  // back in the thunk the interrupt struck
        thunk_from_ = t.from;
        thunk_called_ = t.called;
      }
    } else if (b.at_entry && (b.kind == kFnEventEntry || (far_return_ && b.kind == kFnPlain))) {
      // A return into an event entry, or an IRET into another function's
      // entry, lands on top of the frame it returned to, not in its place:
      //   - no return address is an event entry: an interrupt struck where
      //     the return went, before its first instruction ran (the trace
      //     then has the handler right after the return, with no event);
      //   - an IRET into a plain function's entry is a call the interrupted
      //     function made by proxy: text_poke_bp's INT3 handler emulates the
      //     CALL at a site being rewritten (int3_emulate_call pushes the
      //     return address and IRETs to the target; ftrace patches thousands
      //     of `call __fentry__` sites at a time).
      // Taken as a plain return either would replace that frame, and its
      // own return the one below: a frame lost each time.
      if (b.kind == kFnPlain) count_call(function_of(p), f);
      cur_ = tree_.child(p, f);
    } else {
      // A return past its caller's frame into the one below (a BPF
      // trampoline that called the traced function's body returns to that
      // function's caller) pops both; else the caller was replaced (a tail
      // call) and the return lands in its place.
      const uint32_t g = tree_.node(p).parent;
      const bool past = !tree_.is_root(g) && !is_unknown_base(g) && tree_.node(g).fn == f;
      cur_ = past ? g : tree_.child(g, f);
    }
  } else if (tree_.node(cur_).fn != f) {
    const uint32_t from = tree_.node(cur_).fn;
    if (pending_ == Pending::Jump && b.at_entry && b.kind != kFnThunk) count_call(from, f);  // a tail call
    cur_ = tree_.child(tree_.node(cur_).parent, f);  // a jump into another function replaces the top
    if (b.kind == kFnThunk) {
      thunk_node_ = cur_;
      thunk_called_ = false;
      thunk_from_ = from;
    }
  }
  pending_ = Pending::None;
  far_return_ = false;
}

void PieceWalk::on_block(const Block& b) {
  move({b.fn, b.at_entry, b.kind, b.after_last});
  // A piece that begins inside the switch (its PSB fell there, or in a
  // function __switch_to calls, which returns into it) returns out of it
  // onto the next task's stack too.
  if (b.kind == kFnTaskSwitch && switch_depth_ == 0 && !reset_) switch_depth_ = tree_.node(cur_).depth;
  any_block_ = true;
  count(b.fn, b.ninsn);
  leader_ = b.cls != kClsOther;
  far_return_ = b.cls == kClsFarReturn;
  pending_ = b.cls == kClsCall                                ? Pending::Call
             : b.cls == kClsReturn || b.cls == kClsFarReturn ? Pending::Return
             : b.cls == kClsJump   ? Pending::Jump
                                   : Pending::None;
}

}  // namespace kt
