// The decoder: per-CPU PT streams -> a profile.
//
// Each CPU's stream is split at its PSBs into pieces; the pieces are decoded
// with libipt's block decoder on all cores (std::thread), each thread with its
// own pt_image moved through time by an ImageCursor, and the results are
// merged. Decode errors are classified and counted with their CPU, stream
// offset, address and time; none is dropped silently.
//
// Around text changes the times of sideband and PT may disagree slightly.
// When a piece has errors and a text change lies within `align_window` PT
// time units of it, the piece is decoded again with every change moved
// earlier and later by the window, and the candidate with the fewest errors
// (then the most instructions) is kept. By default the window is the piece's
// own span (kAlignAuto).
//
// A PSB carries no call stack: each piece's stacks are rooted at where it
// began and stitched, per CPU in stream order, onto the stack the previous
// piece ended with. A task switch inside a piece starts a new segment, put
// onto the stack the next task had when it last left a CPU (any CPU): the
// guest's TASK_SWITCHES log says which task that is (stack_stitch.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kthost/bundle/pt_stream.h"
#include "kthost/common/result.h"
#include "kthost/decode/image.h"
#include "kthost/decode/symbolizer.h"

namespace kt {

struct Piece {
  uint32_t cpu = 0;
  uint64_t begin = 0, end = 0;  // byte offsets in the CPU's stream, begin at a PSB
  uint64_t time = 0;            // the PSB+'s TSC (0 when it has none)
  uint64_t next_fup = 0;        // the FUP IP in the next piece's PSB+ (0: none): where this piece's execution ends
  uint64_t end_time = 0;        // the next piece's TSC (0: none): the piece ran between time and end_time
};
// Splits a stream at every PSB. Bytes before the first PSB are not a piece.
std::vector<Piece> split_at_psb(uint32_t cpu, const PtStream& pt);

enum class DecodeErrorKind { NoText, Desync, Overflow, Other };
const char* decode_error_kind_name(DecodeErrorKind k);

struct DecodeErrorRecord {
  DecodeErrorKind kind = DecodeErrorKind::Other;
  uint32_t cpu = 0;
  uint64_t offset = 0, ip = 0, time = 0;
  std::string detail;  // libipt's error text
};

struct FunctionCounts {
  uint64_t insns = 0, calls = 0;
};

// Every caller -> callee step of the stacks, checked against the caller's
// machine code in the image (every version of it): the caller has a direct
// call to the callee's entry, or an indirect call, or a direct call to a
// function that tail-jumps to the callee (or is a thunk); or the callee is an
// interrupt or exception entry, or other code of the kernel's entry text.
// Steps whose caller has no text are unchecked. A step with no call site
// where the caller calls a function whose ftrace site is on is counted apart:
// an ftrace_ops with IPMODIFY (livepatch, ktguard's hooks) runs another
// function on that function's frame, which no call site shows.
struct StackEdgeCheck {
  uint64_t steps = 0;         // distinct (caller, callee) steps
  uint64_t interrupts = 0;    // ... onto an entry point, or other code of the kernel's entry text
  uint64_t ftrace_redirects = 0;  // ... with no call site, but the caller calls a function whose ftrace site is on
  uint64_t unchecked = 0;     // ... with no text for the caller, or an unknown frame
  uint64_t failed = 0;        // ... with no call site
  uint64_t failed_insns = 0;  // instructions in stacks with a failed step
  std::vector<std::pair<uint32_t, uint32_t>> examples;  // (caller, callee): the 10 failed with the most instructions
};

// The guest's task switches (its TASK_SWITCHES sideband), per CPU in the
// order they happened: (PT time, tid switched to; 0 is that CPU's idle task).
struct TaskSwitchLog {
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint32_t>>> by_cpu;
  // Sideband losses that may have taken switch records: (CPU, or UINT32_MAX
  // for every CPU; PT time of the report). The records were lost before that
  // time, after the CPU's previous loss report.
  std::vector<std::pair<uint32_t, uint64_t>> losses;
  uint64_t size() const;
};

// How the task switches in PT (returns out of __switch_to_asm) were matched
// to the guest's own record of them, and what that gave the stacks.
struct TaskSwitchStats {
  uint64_t logged = 0;   // switches in the guest's log
  uint64_t seen = 0;     // task switches the decode walked through
  uint64_t matched = 0;  // ... matched to a logged switch (so the task is known)
  uint64_t resumed = 0;  // ... onto the stack the task had when it last left a CPU
  uint64_t after_loss = 0;  // ... matched, but near a sideband loss: which task left is unsure, nothing kept or resumed
  uint64_t at_piece_edge = 0;  // switches whose return ended a piece: the next piece starts on [base unknown]
  int64_t clock_offset = 0;  // PT time units added to the log's times to match (estimated)
};

struct Profile {
  uint64_t insns = 0, blocks = 0, pieces = 0, bytes = 0;
  std::map<uint32_t, uint64_t> cpu_insns;
  std::map<uint32_t, FunctionCounts> functions;                   // function id -> totals
  std::map<uint32_t, std::map<uint32_t, uint64_t>> cpu_functions;  // cpu -> function -> insns
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> edges;        // (caller, callee) -> calls
  std::map<std::vector<uint32_t>, uint64_t> stacks;               // root..leaf -> insns
  std::set<std::pair<uint32_t, uint64_t>> blocks_seen;            // (function, block start)
  std::map<DecodeErrorKind, uint64_t> error_counts;
  uint64_t skipped_bytes = 0;             // PT bytes an error left undecoded (up to the next PSB)
  uint64_t loop_insns_dropped = 0;        // instructions of a loop no packet confirmed (a wrong path), not counted
  std::vector<DecodeErrorRecord> errors;  // the first max_error_examples, by CPU and offset
  uint64_t alignment_retries = 0, alignment_fixed = 0, image_rebuilds = 0;
  StackEdgeCheck stack_edges;
  TaskSwitchStats task_switches;
  unsigned threads = 1;
  double seconds = 0;
  // Where `seconds` went: "split" (PSB pieces and chunks), "decode" (the
  // threads), "merge" (their results into one), "stitch" (stacks across pieces).
  std::map<std::string, double> phase_seconds;
};

// align_window: the span of the piece itself (its PSB's time to the next
// PSB's). With no timing packet between PSBs (the software PT) every
// instruction of a piece decodes by the piece's start time, though it ran up
// to that span later: a module loaded in between is missing text otherwise.
inline constexpr uint64_t kAlignAuto = UINT64_MAX;

struct DecodeOptions {
  unsigned threads = 0;                // 0: every core
  std::optional<uint32_t> cpu;         // decode only this CPU
  uint64_t align_window = kAlignAuto;  // PT time units; 0: no candidate alignments
  // PT time units by which the sideband's times may be off (a clock kthost
  // trace estimated from arrival times): a piece that still has errors after
  // the align window is also tried just after and just before each of the
  // text changes this close to it (the 16 nearest). 0: not tried.
  uint64_t clock_uncertainty = 0;
  size_t max_error_examples = 50;
  uint64_t chunk_bytes = 1u << 20;     // pieces are grouped into chunks of about this much PT
  unsigned cache_bits = 16;            // per-thread block cache: 2^bits entries (32 bytes each)
  bool check_stack_edges = true;       // Profile::stack_edges (after the decode; not in Profile::seconds)
  // The guest's task switches: a task's stack resumes where it left off
  // (null: every switched-in stack starts on [base unknown]).
  const TaskSwitchLog* task_switches = nullptr;
  // Called from the calling thread about every 200 ms: (PT bytes done, total).
  std::function<void(uint64_t, uint64_t)> progress;
};

// Errors: InvalidArgument (unknown CPU), LimitExceeded (libipt allocation).
StackEdgeCheck check_stack_edges(const Profile& profile, const VersionedImage& image, const Symbolizer& symbols);

Result<Profile> decode_profile(const PtStreams& pt, const VersionedImage& image,
                               const Symbolizer& symbols, const DecodeOptions& options);

// One line of an instruction trace (itrace): an instruction, or an event.
struct TraceLine {
  uint32_t cpu = 0;
  uint64_t time = 0, ip = 0;
  uint8_t size = 0;
  uint8_t raw[15] = {};
  std::string kind;  // "insn", "call", "return", "jump", "jcc", "far", or an event name
  uint32_t function = 0;
};
// The instruction trace for PT time [from, to] (libipt's instruction decoder,
// sequential). Stops after max_lines.
Result<std::vector<TraceLine>> decode_trace(const PtStreams& pt,
                                            const VersionedImage& image, const Symbolizer& symbols,
                                            std::optional<uint32_t> cpu, uint64_t from, uint64_t to,
                                            size_t max_lines = 1000000);

// The benchmark's baseline: libipt's instruction decoder over a whole stream,
// one thread, the image as of time 0 moved forward by time. Returns instructions.
Result<uint64_t> count_insns_baseline(const PtStream& pt, const VersionedImage& image);
// The same with libipt's block decoder used plainly (as its documentation
// shows it): the decoder kthost's own is measured against.
Result<uint64_t> count_insns_block_baseline(const PtStream& pt, const VersionedImage& image);

}  // namespace kt
