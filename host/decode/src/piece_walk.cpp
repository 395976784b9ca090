#include "piece_walk.h"

#include <algorithm>

#include "kthost/decode/symbolizer.h"

namespace kt {

uint32_t CallTree::child(uint32_t parent, uint32_t fn) {
  if (nodes_[parent].depth >= 256) parent = nodes_[parent].parent;  // bounded stacks: replace the top
  uint64_t key = (uint64_t{parent} << 32) | fn;
  auto [it, fresh] = children_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (fresh) {
    uint32_t marker = parent == 0 ? ((fn & kStackMarker) && fn != UINT32_MAX ? fn : 0) : nodes_[parent].marker;
    nodes_.push_back({parent, fn, nodes_[parent].depth + 1, marker});
  }
  return it->second;
}

void CallTree::path_of(uint32_t node, std::vector<uint32_t>& path) const {
  path.clear();
  for (uint32_t x = node; x != 0; x = nodes_[x].parent) path.push_back(nodes_[x].fn);
  std::reverse(path.begin(), path.end());
}

uint32_t PieceWalk::root_for(uint32_t fn) {
  return reset_ ? tree_.child(0, fn)
                : tree_.child(tree_.child(0, kStackMarker | std::min(underflows_, 0xffffu)), fn);
}

void PieceWalk::reset_stack() {
  cur_ = 0;
  reset_ = true;
  pending_ = Pending::None;
}

void PieceWalk::on_time(uint64_t time) {
  if (time > now_) {
    now_ = time;
    time_uncertain_ = false;
  }
}

void PieceWalk::on_overflow() {
  reset_stack();
  leader_ = true;
  time_uncertain_ = true;  // until a later time arrives
}

void PieceWalk::on_tracing_changed() {
  reset_stack();
  leader_ = true;
}

void PieceWalk::on_interrupt() {
  pending_ = Pending::Push;
  leader_ = true;
}

DecodeErrorKind PieceWalk::on_error(DecodeErrorKind kind) {
  reset_stack();
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

void PieceWalk::on_block(const Block& b) {
  uint32_t f = b.fn;
  // A call into its own function but not to its entry is no call: return
  // stack buffer stuffing (FILL_RETURN_BUFFER in __switch_to_asm and the
  // entry code) calls the next instruction and never returns, so a frame
  // for it would never be popped.
  if (pending_ == Pending::Call && cur_ != 0 && f == tree_.node(cur_).fn && f != Symbolizer::kUnknown && !b.at_entry)
    pending_ = Pending::None;
  if (pending_ == Pending::Call) {
    uint32_t caller = tree_.node(cur_).fn == UINT32_MAX ? Symbolizer::kUnknown : tree_.node(cur_).fn;
    s_.edges[(uint64_t{caller} << 32) | f]++;
    if (s_.fn_insns[f] == 0 && s_.fn_calls[f] == 0) s_.fn_touched.push_back(f);
    s_.fn_calls[f]++;
    cur_ = cur_ == 0 ? root_for(f) : tree_.child(cur_, f);
  } else if (pending_ == Pending::Push) {
    cur_ = cur_ == 0 ? root_for(f) : tree_.child(cur_, f);
  } else if (cur_ == 0) {
    cur_ = root_for(f);
  } else if (pending_ == Pending::Return) {
    uint32_t p = tree_.node(cur_).parent;
    if (tree_.is_root(p)) {
      if (!reset_) ++underflows_;  // returned below where the piece began
      cur_ = root_for(f);
    } else {
      cur_ = tree_.node(p).fn == f ? p : tree_.child(tree_.node(p).parent, f);
    }
  } else if (tree_.node(cur_).fn != f) {
    cur_ = tree_.child(tree_.node(cur_).parent, f);  // a jump into another function replaces the top
  }
  count(f, b.ninsn);
  leader_ = b.cls != kClsOther;
  pending_ = b.cls == kClsCall ? Pending::Call : b.cls == kClsReturn ? Pending::Return : Pending::None;
}

}  // namespace kt
