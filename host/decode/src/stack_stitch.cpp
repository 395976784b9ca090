// Stacks across pieces and task switches (see stack_stitch.h).
#include "stack_stitch.h"

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>

namespace kt {
namespace {

// A segment's stack rooted at a marker continues `prefix`, the stack the
// segment began with: the marker's count of frames popped below its first
// function, and that function, replace the top of `prefix`. Popped below all
// of `prefix` (or below its [base unknown]), the stack stands on [base
// unknown]: the frames under it were never seen.
//
// `resumed`: the prefix is the stack a task had when it last left a CPU,
// matched to this switch from the guest's log. The segment's returns out of
// the switch must then go back into the prefix's own frames: a segment whose
// first function is not the frame it replaces (the idle task's
// schedule_idle where the prefix has schedule) ran another task than the
// log matched, and stands on [base unknown] instead.
std::vector<uint32_t> stitch(const std::vector<uint32_t>& prefix, const std::vector<uint32_t>& path,
                             uint32_t base_unknown, bool resumed = false) {
  if (path.empty() || path[0] == UINT32_MAX || !(path[0] & kStackMarker)) return path;
  size_t popped = 1 + marker_popped(path[0]);
  std::vector<uint32_t> out;
  if (resumed && popped <= prefix.size() && path.size() > 1 && prefix[prefix.size() - popped] != path[1])
    out.push_back(base_unknown);
  else if (popped < prefix.size())
    out.assign(prefix.begin(), prefix.end() - static_cast<long>(popped));
  else if (popped > prefix.size() || prefix[0] == base_unknown)
    out.push_back(base_unknown);
  out.insert(out.end(), path.begin() + 1, path.end());
  if (out.size() > 512) out.erase(out.begin(), out.end() - 512);  // bounded, like the stacks themselves
  return out;
}

uint64_t minus(uint64_t t, int64_t off) {
  if (off >= 0) return t >= static_cast<uint64_t>(off) ? t - static_cast<uint64_t>(off) : 0;
  const uint64_t add = static_cast<uint64_t>(-(off + 1)) + 1;
  return t > UINT64_MAX - add ? UINT64_MAX : t + add;
}
uint64_t plus(uint64_t t, int64_t off) { return off == INT64_MIN ? minus(minus(t, INT64_MAX), 1) : minus(t, -off); }

using Log = std::vector<std::pair<uint64_t, uint32_t>>;

// The log's records whose time, moved by `off`, lies in the span: [first, last).
std::pair<size_t, size_t> records_in(const std::vector<uint64_t>& times, const SwitchSpan& s, int64_t off) {
  auto lo = std::lower_bound(times.begin(), times.end(), minus(s.time, off));
  auto hi = s.end_time == 0 ? times.end() : std::lower_bound(lo, times.end(), minus(s.end_time, off));
  return {static_cast<size_t>(lo - times.begin()), static_cast<size_t>(hi - times.begin())};
}

bool usable(const SwitchSpan& s) { return s.complete && s.time != 0 && (s.end_time == 0 || s.end_time > s.time); }

}  // namespace

void land_piece_start(std::vector<uint32_t>& prefix, const PieceEnd& end, const PieceStacks& next,
                      uint32_t base_unknown, Profile& out) {
  const uint32_t fn = next.first_fn;
  auto count_call_from = [&](uint32_t caller) {
    out.functions[fn].calls++;
    out.edges[{caller == base_unknown ? Symbolizer::kUnknown : caller, fn}]++;
  };
  auto count_call = [&] { count_call_from(prefix.empty() ? Symbolizer::kUnknown : prefix.back()); };
  const auto pending = static_cast<PieceWalk::Pending>(end.pending);
  if (end.switch_return) {
    // The next task's stack: not the one the switch's frames are on. (No
    // log record is matched to this switch: the next piece stands on [base
    // unknown] rather than on the task that left.)
    out.task_switches.at_piece_edge++;
    prefix.assign(1, base_unknown);
    return;
  }
  if (end.in_thunk && pending != PieceWalk::Pending::Push && prefix.size() > 1 && prefix.back() != fn) {
    if (end.thunk_called) count_call_from(prefix[prefix.size() - 2]);
    else if (next.first_at_entry) count_call_from(end.thunk_from);  // a tail call through the thunk
    return;  // the thunk's frame is the callee's: the top is replaced
  }
  if (pending == PieceWalk::Pending::Call && !prefix.empty() && prefix.back() == fn && !next.first_at_entry)
    return;  // a call into its own function, not at its entry: no call (return stack stuffing)
  const bool after_last = end.last_ip != 0 && next.first_ip > end.last_ip && next.first_ip - end.last_ip <= 2;
  bool stand_on_top = next.first_event_entry && next.first_at_entry &&
                      (pending == PieceWalk::Pending::Return || pending == PieceWalk::Pending::None);
  switch (pending) {
    case PieceWalk::Pending::Return:
      if (after_last) {
        stand_on_top = false;  // sync_core(): no frame to pop
        break;
      }
      if (prefix.size() > 1) prefix.pop_back();
      else prefix.assign(1, base_unknown);  // returned below everything known
      if (end.far_return && next.first_at_entry && !next.first_event_entry && prefix.back() != base_unknown &&
          prefix.back() != fn) {
        count_call();  // by proxy: the IRET went to another function's entry
        stand_on_top = true;
      }
      break;
    case PieceWalk::Pending::Call:
      count_call();
      prefix.push_back(fn);
      break;
    case PieceWalk::Pending::Push: prefix.push_back(fn); break;
    case PieceWalk::Pending::Jump:  // a tail call when it enters another function at its entry
      if (next.first_at_entry && !prefix.empty() && prefix.back() != fn) count_call();
      break;
    case PieceWalk::Pending::None: break;
  }
  // (After a call or an interrupt the entry is already pushed; after a jump
  // it replaces the jumper: irq_entries_start's stubs jump to
  // asm_common_interrupt.)
  if (stand_on_top && !prefix.empty() && prefix.back() != base_unknown) prefix.push_back(prefix.back());
}

SwitchMatch match_task_switches(const std::vector<SwitchSpan>& spans, const Log& log) {
  SwitchMatch m;
  size_t total = 0;
  for (const auto& s : spans) total += s.count;
  m.record.assign(total, -1);
  if (log.empty() || total == 0) return m;
  std::vector<uint64_t> times(log.size());
  for (size_t i = 0; i < log.size(); ++i) times[i] = log[i].first;

  // Each sampled piece, with its first logged switch being record j, holds
  // exactly its own switches for the offsets in one interval; the offset
  // inside the most intervals (a sweep over their ends) holds the most
  // pieces right. The records tried for j are those near the piece's time.
  std::vector<size_t> sample;
  for (size_t i = 0; i < spans.size(); ++i)
    if (usable(spans[i]) && spans[i].end_time != 0) sample.push_back(i);
  if (sample.size() > 1024) {
    std::vector<size_t> kept;
    for (size_t k = 0; k < 1024; ++k) kept.push_back(sample[k * sample.size() / 1024]);
    sample.swap(kept);
  }
  auto t = [](uint64_t v) { return static_cast<int64_t>(std::min<uint64_t>(v, uint64_t{1} << 62)); };
  std::vector<std::pair<int64_t, int>> ends;  // (offset, +1 opens / -1 closes)
  const int64_t far = int64_t{1} << 62;
  for (size_t i : sample) {
    const SwitchSpan& s = spans[i];
    const size_t near = static_cast<size_t>(std::lower_bound(times.begin(), times.end(), s.time) - times.begin());
    for (size_t j = near > 64 ? near - 64 : 0; j <= near + 64 && j + s.count <= times.size(); ++j) {
      int64_t lo = -far, hi = far;
      if (s.count > 0) {
        lo = std::max(lo, t(s.time) - t(times[j]));
        hi = std::min(hi, t(s.end_time) - t(times[j + s.count - 1]));
      }
      if (j > 0) hi = std::min(hi, t(s.time) - t(times[j - 1]));
      if (j + s.count < times.size()) lo = std::max(lo, t(s.end_time) - t(times[j + s.count]));
      if (lo >= hi) continue;
      ends.emplace_back(lo, 1);
      ends.emplace_back(hi, -1);
    }
  }
  std::sort(ends.begin(), ends.end());  // at one offset a close comes before an open: [lo, hi)
  int depth = 0, best = 0;
  for (size_t k = 0; k < ends.size(); ++k) {
    depth += ends[k].second;
    if (ends[k].second > 0 && depth > best && k + 1 < ends.size()) {
      best = depth;
      const int64_t lo = ends[k].first, hi = ends[k + 1].first;
      m.offset = lo + (hi - lo) / 2;
    }
  }

  // A record comes a little before its switch, by a varying lead: one near
  // a window's edge can fall in the window before. So a window whose count
  // differs is taken together with the complete windows after it (up to
  // kMaxGroup) until the counts agree: the order inside says which is which.
  constexpr size_t kMaxGroup = 8;
  std::vector<size_t> first_switch(spans.size() + 1, 0);
  for (size_t i = 0; i < spans.size(); ++i) first_switch[i + 1] = first_switch[i] + spans[i].count;
  for (size_t i = 0; i < spans.size();) {
    if (!usable(spans[i])) {
      ++i;
      continue;
    }
    size_t matched_to = i;  // the group [i, matched_to) that agrees, if any
    uint32_t count = 0;
    for (size_t j = i; j < spans.size() && j < i + kMaxGroup && usable(spans[j]); ++j) {
      count += spans[j].count;
      SwitchSpan group{spans[i].time, spans[j].end_time, count, true};
      auto [lo, hi] = records_in(times, group, m.offset);
      if (hi - lo == count) {
        for (uint32_t k = 0; k < count; ++k) m.record[first_switch[i] + k] = static_cast<int64_t>(lo + k);
        matched_to = j + 1;
        break;
      }
      if (spans[j].end_time == 0) break;
    }
    i = matched_to > i ? matched_to : i + 1;
  }
  return m;
}

namespace {

struct StackKey {
  size_t decoder;
  uint32_t prefix, node;
  bool operator==(const StackKey& o) const { return decoder == o.decoder && prefix == o.prefix && node == o.node; }
};
struct StackKeyHash {
  size_t operator()(const StackKey& k) const {
    return std::hash<uint64_t>()((uint64_t{k.prefix} << 32 | k.node) * 31 + k.decoder);
  }
};

// One step of a CPU's stitching (see stack_stitch.h).
struct Action {
  enum Kind : uint8_t { Begin, Switch, Logged, End, Loss } kind;
  uint64_t time;
  size_t piece;   // index into the sorted pieces (Begin, Switch, End)
  uint32_t k;     // Switch: which of the piece's switches (0-based); Logged: unused
  int64_t record; // Switch: the matched record or -1; Logged: the record
};

// Which of a CPU's records (times in `log`) are near a loss reported at
// `losses` (sorted, the same clock): those after the previous loss up to
// this one, and the first after it.
std::vector<char> records_near_losses(const Log& log, const std::vector<uint64_t>& losses) {
  std::vector<char> near(log.size(), 0);
  uint64_t from = 0;
  size_t r = 0;
  for (uint64_t loss : losses) {
    while (r < log.size() && log[r].first <= from) ++r;
    while (r < log.size() && log[r].first <= loss) near[r++] = 1;
    if (r < log.size()) near[r] = 1;
    from = loss;
  }
  return near;
}

class Stitcher {
 public:
  Stitcher(std::vector<PieceStacks>& pieces, const std::vector<std::unique_ptr<PieceDecoder>>& decoders,
           uint32_t base_unknown, Profile& out)
      : pieces_(pieces), decoders_(decoders), base_unknown_(base_unknown), out_(out) {}

  void run(const TaskSwitchLog* log);
  // This CPU's loss reports (its own and every CPU's), sorted, in the log's time.
  static std::vector<uint64_t> losses_of(const TaskSwitchLog* log, uint32_t cpu);

 private:
  struct Cpu {
    uint32_t id = 0;
    const Log* log = nullptr;
    std::vector<Action> actions;
    size_t next = 0;
    uint64_t key = 0;  // time of the last action taken: a CPU's actions never go back in time
    std::vector<uint32_t> prefix;
    PieceEnd end;  // how the previous piece ended
    std::vector<std::vector<uint32_t>> segments;  // the current piece's segment stacks
    std::vector<uint32_t> segment_ids;            // ... interned (UINT32_MAX: not yet)
    std::vector<char> resumed;                    // ... the stack a task left with (see stitch)
    std::vector<char> near_loss;                  // per record: records_near_losses
  };
  void plan(Cpu& c, size_t first, size_t last, const std::vector<uint64_t>& losses);
  void take(Cpu& c, const Action& a);
  uint64_t task(const Cpu& c, uint32_t tid) const { return tid != 0 ? tid : (uint64_t{1} << 32) | c.id; }
  std::vector<uint32_t> resolve(const Cpu& c, uint32_t node, size_t decoder);
  uint32_t intern(Cpu& c, size_t segment);

  std::vector<PieceStacks>& pieces_;
  const std::vector<std::unique_ptr<PieceDecoder>>& decoders_;
  uint32_t base_unknown_;
  Profile& out_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> left_;  // task -> its stack when it last left a CPU
  std::map<std::pair<std::vector<uint32_t>, bool>, uint32_t> prefix_ids_;  // (prefix, resumed) -> id
  std::vector<const std::pair<std::vector<uint32_t>, bool>*> prefixes_;
  std::unordered_map<StackKey, uint64_t, StackKeyHash> counts_;
  std::vector<uint32_t> path_;
  size_t most_switches_ = 0;
};

std::vector<uint64_t> Stitcher::losses_of(const TaskSwitchLog* log, uint32_t cpu) {
  std::vector<uint64_t> times;
  if (log)
    for (const auto& [at, time] : log->losses)
      if (at == cpu || at == UINT32_MAX) times.push_back(time);
  std::sort(times.begin(), times.end());
  return times;
}

void Stitcher::plan(Cpu& c, size_t first, size_t last, const std::vector<uint64_t>& losses) {
  std::vector<SwitchSpan> spans;
  for (size_t i = first; i < last; ++i) spans.insert(spans.end(), pieces_[i].windows.begin(), pieces_[i].windows.end());
  SwitchMatch match;
  if (c.log) {
    match = match_task_switches(spans, *c.log);
    out_.task_switches.logged += c.log->size();
    if (c.log->size() > most_switches_) {
      most_switches_ = c.log->size();
      out_.task_switches.clock_offset = match.offset;
    }
  } else {
    size_t n = 0;
    for (const auto& s : spans) n += s.count;
    match.record.assign(n, -1);
  }
  // Piece actions in stream order; logged switches the decode did not see
  // are put between them by time.
  if (c.log) c.near_loss = records_near_losses(*c.log, losses);
  std::vector<char> used(c.log ? c.log->size() : 0, 0);
  for (int64_t r : match.record)
    if (r >= 0) used[static_cast<size_t>(r)] = 1;
  size_t ordinal = 0, unseen = 0;
  auto unseen_before = [&](uint64_t time) {
    for (; unseen < used.size(); ++unseen) {
      if (used[unseen]) continue;
      const uint64_t t = plus((*c.log)[unseen].first, match.offset);
      if (t >= time) break;
      c.actions.push_back({Action::Logged, t, 0, 0, static_cast<int64_t>(unseen)});
    }
  };
  size_t loss = 0;
  auto add = [&](const Action& a) {
    for (; loss < losses.size() && plus(losses[loss], match.offset) <= a.time; ++loss) {
      unseen_before(plus(losses[loss], match.offset));
      c.actions.push_back({Action::Loss, plus(losses[loss], match.offset), 0, 0, -1});
    }
    unseen_before(a.time);
    c.actions.push_back(a);
  };
  for (size_t i = first; i < last; ++i) {
    const PieceStacks& p = pieces_[i];
    add({Action::Begin, p.time, i, 0, -1});
    for (uint32_t k = 0; k < p.switch_out.size(); ++k, ++ordinal) {
      const int64_t r = match.record[ordinal];
      add({Action::Switch, r >= 0 ? plus((*c.log)[static_cast<size_t>(r)].first, match.offset) : p.time, i, k, r});
      out_.task_switches.seen++;
      out_.task_switches.matched += r >= 0;
    }
    add({Action::End, p.time, i, 0, -1});
  }
  add({Action::Loss, UINT64_MAX, 0, 0, -1});  // the losses after the last piece (and then a no-op)
  unseen_before(UINT64_MAX);  // the rest of the log
}

std::vector<uint32_t> Stitcher::resolve(const Cpu& c, uint32_t node, size_t decoder) {
  decoders_[decoder]->path_of(node, path_);
  if (path_.empty() || !(path_[0] & kStackMarker) || path_[0] == UINT32_MAX) return path_;
  const size_t seg = marker_segment(path_[0]);
  static const std::vector<uint32_t> none;
  if (seg >= c.segments.size()) return stitch(none, path_, base_unknown_);
  return stitch(c.segments[seg], path_, base_unknown_, c.resumed[seg]);
}

uint32_t Stitcher::intern(Cpu& c, size_t segment) {
  if (segment >= c.segments.size()) segment = 0;
  if (c.segment_ids[segment] == UINT32_MAX) {
    auto [it, fresh] = prefix_ids_.try_emplace({c.segments[segment], c.resumed[segment] != 0},
                                               static_cast<uint32_t>(prefixes_.size()));
    if (fresh) prefixes_.push_back(&it->first);
    c.segment_ids[segment] = it->second;
  }
  return c.segment_ids[segment];
}

void Stitcher::take(Cpu& c, const Action& a) {
  switch (a.kind) {
    case Action::Begin: {
      const PieceStacks& p = pieces_[a.piece];
      if ((c.end.pending != 0 || c.end.in_thunk || p.first_event_entry) && p.first_fn != UINT32_MAX)
        land_piece_start(c.prefix, c.end, p, base_unknown_, out_);
      c.segments.assign(1, c.prefix);
      c.segment_ids.assign(1, UINT32_MAX);
      c.resumed.assign(1, 0);
      return;
    }
    case Action::Switch: {
      const PieceStacks& p = pieces_[a.piece];
      std::vector<uint32_t> leaving = resolve(c, p.switch_out[a.k], p.decoder);
      std::vector<uint32_t> next{base_unknown_};
      char resumed = 0;
      if (a.record >= 0 && c.near_loss[static_cast<size_t>(a.record)]) {
        out_.task_switches.after_loss++;
      } else if (a.record >= 0) {
        const Log& log = *c.log;
        const size_t r = static_cast<size_t>(a.record);
        if (r > 0) left_[task(c, log[r - 1].second)] = std::move(leaving);
        auto it = left_.find(task(c, log[r].second));
        if (it != left_.end()) {
          next = std::move(it->second);
          left_.erase(it);
          resumed = 1;
          out_.task_switches.resumed++;
        }
      }
      c.segments.push_back(std::move(next));
      c.segment_ids.push_back(UINT32_MAX);
      c.resumed.push_back(resumed);
      return;
    }
    case Action::Logged: {
      // Both tasks ran on where the decode could not see: forget them.
      const Log& log = *c.log;
      const size_t r = static_cast<size_t>(a.record);
      if (r > 0) left_.erase(task(c, log[r - 1].second));
      left_.erase(task(c, log[r].second));
      return;
    }
    case Action::Loss:
      left_.clear();  // a task a lost record named may have left since: none is trusted
      return;
    case Action::End: {
      PieceStacks& p = pieces_[a.piece];
      const PieceDecoder& d = *decoders_[p.decoder];
      for (const auto& [node, n] : p.nodes) {
        const uint32_t marker = d.root_marker(node);
        const uint32_t key_prefix = marker ? intern(c, marker_segment(marker)) + 1 : 0;
        counts_[{p.decoder, key_prefix, node}] += n;
      }
      if (p.final_node != UINT32_MAX) {  // (else the piece had no block: the stack is as it began)
        c.prefix = resolve(c, p.final_node, p.decoder);
        c.end = p.end;
      }
      return;
    }
  }
}

void Stitcher::run(const TaskSwitchLog* log) {
  std::sort(pieces_.begin(), pieces_.end(), [](const PieceStacks& a, const PieceStacks& b) {
    return a.cpu != b.cpu ? a.cpu < b.cpu : a.begin < b.begin;
  });
  std::vector<Cpu> cpus;
  for (size_t i = 0; i < pieces_.size();) {
    size_t j = i;
    while (j < pieces_.size() && pieces_[j].cpu == pieces_[i].cpu) ++j;
    Cpu c;
    c.id = pieces_[i].cpu;
    if (log)
      if (auto it = log->by_cpu.find(c.id); it != log->by_cpu.end()) c.log = &it->second;
    plan(c, i, j, losses_of(log, c.id));
    cpus.push_back(std::move(c));
    i = j;
  }
  // CPUs by time: a task that left one CPU resumes on another later.
  using Next = std::pair<uint64_t, size_t>;
  std::priority_queue<Next, std::vector<Next>, std::greater<Next>> order;
  for (size_t i = 0; i < cpus.size(); ++i)
    if (!cpus[i].actions.empty()) order.push({cpus[i].actions[0].time, i});
  while (!order.empty()) {
    Cpu& c = cpus[order.top().second];
    order.pop();
    const Action& a = c.actions[c.next++];
    c.key = std::max(c.key, a.time);
    take(c, a);
    if (c.next < c.actions.size()) order.push({std::max(c.key, c.actions[c.next].time), static_cast<size_t>(&c - cpus.data())});
  }
  for (const auto& [k, n] : counts_) {
    decoders_[k.decoder]->path_of(k.node, path_);
    if (!k.prefix) {
      out_.stacks[path_] += n;
      continue;
    }
    const auto& [prefix, resumed] = *prefixes_[k.prefix - 1];
    out_.stacks[stitch(prefix, path_, base_unknown_, resumed)] += n;
  }
}

}  // namespace

uint64_t TaskSwitchLog::size() const {
  uint64_t n = 0;
  for (const auto& [cpu, list] : by_cpu) n += list.size();
  return n;
}

void stitch_stacks(std::vector<PieceStacks>& pieces, const std::vector<std::unique_ptr<PieceDecoder>>& decoders,
                   uint32_t base_unknown, const TaskSwitchLog* log, Profile& out) {
  Stitcher(pieces, decoders, base_unknown, out).run(log);
}

}  // namespace kt
