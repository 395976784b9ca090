#!/usr/bin/env python3
"""kthost report's call stacks and counts against the plugin's stack truth.

  check-stacks.py BUNDLE FOLDED REPORT_JSON TRUTH... [--json OUT] [--min-exact P]
                  [--min-exact-known P] [--min-function-recall P] [--max-deepest-excess N]

TRUTH: the files the software PT plugin wrote with truth=on for this trace
(OUT/cpuN.truth-G, one per vCPU). They come from the guest's stack pointer
(the slots its calls, returns and IRETs touched: pt-plugin/truth_stacks.h),
not from PT, and are read here with nothing of kthost's: FOLDED and
REPORT_JSON are kthost's own output (`kthost report --folded`, `--json`).
Frames are named from the bundle's kallsyms and module list as kthost names
them ("name", "name_[module]"); anything kallsyms does not name (BPF
programs, trampolines, unnamed module text) is "[other]" on both sides.

Prints, and with --json writes:
  exact_share     instructions attributed to exactly the true full stack
  exact_share_known_base  ... among those whose true stack has a known base
                  (--min-exact-known: where the truth lost the base, after a
                  task moved to another vCPU or an overflow, kthost's stitched
                  stack can only differ from it, so that share varies from run
                  to run with the truth's own gaps, 16% to 26% of a main job)
  function_precision / function_recall  per-function instruction counts:
                  sum of min(truth, kthost) over kthost's and the truth's totals
  functions_off   functions with >= 10,000 true instructions whose count
                  differs from the truth by more than 0.01%
  calls_equal / calls_compared  functions with >= 100 true calls whose call
                  count equals the truth's
  deepest_truth / deepest_kthost  frames in the deepest stack
Exit status 0 when every given threshold holds, 1 when one does not, 2 on
unreadable input.
"""
import bisect
import json
import re
import sys
from collections import defaultdict

TEXT = set("tTwW")
THUNK = re.compile(r"^__x86_indirect_(call_|jump_|its_)?thunk_")


def rank(name):
    marker = (name.startswith("__start_") or name.startswith("__stop_") or name in ("_stext", "_etext", "_text")
              or (name.startswith("__") and (name.endswith("_start") or name.endswith("_end")))
              or name.endswith("_array"))
    return 0 if marker else 1


class Symbols:
    """Text symbols from kallsyms: each runs to the next (within its module)."""

    def __init__(self, kallsyms_path, modules_path):
        mods = {}
        for line in open(modules_path, encoding="ascii", errors="replace"):
            p = line.split()
            if len(p) >= 6:
                try:
                    mods[p[0]] = (int(p[5], 16), int(p[1]))
                except ValueError:
                    pass
        by_addr = {}
        for line in open(kallsyms_path, encoding="ascii", errors="replace"):
            p = line.rstrip("\n").split(None, 3)
            if len(p) < 3 or p[1] not in TEXT:
                continue
            mod = p[3].strip()[1:-1] if len(p) == 4 else ""
            if mod == "bpf" or mod.startswith("__builtin__"):
                continue
            if mod and mod not in mods:
                continue
            addr = int(p[0], 16)
            old = by_addr.get(addr)
            if old is None or rank(p[2]) >= rank(old[0]):
                by_addr[addr] = (p[2], mod)
        self.starts = sorted(by_addr)
        self.names = [by_addr[a] for a in self.starts]
        self.ends = []
        for i, a in enumerate(self.starts):
            end = self.starts[i + 1] if i + 1 < len(self.starts) else a + 4096
            mod = self.names[i][1]
            if mod:
                base, size = mods[mod]
                end = min(end, base + size)
            elif i + 1 < len(self.starts) and self.names[i + 1][1]:
                end = min(end, a + 4096)
            self.ends.append(end)
        self.cache = {}

    def at(self, addr):
        """(frame key, start) of the function at addr; ("[other]", None) when none."""
        hit = self.cache.get(addr)
        if hit is not None:
            return hit
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr >= self.ends[i]:
            hit = ("[other]", None)
        else:
            name, mod = self.names[i]
            key = name if not mod else name + " [" + mod + "]"
            hit = (key.replace(";", ":").replace(" ", "_"), self.starts[i])
        self.cache[addr] = hit
        return hit


def normalise(frame):
    if frame.startswith("[unknown]") or frame.endswith("_[bpf]"):
        return "[other]"
    return frame


def read_truth(paths, syms):
    stacks = defaultdict(int)
    functions = defaultdict(int)
    calls = defaultdict(int)
    unresolved = 0
    unseen_returns = [0]  # returns of calls the truth did not see (INT3-emulated calls)
    for path in paths:
        nodes = {}
        blocks = {}
        counts = []
        ended = False
        with open(path, encoding="ascii") as f:
            head = f.readline().split()
            if head[:2] != ["ktpt-truth", "1"]:
                raise ValueError(f"{path}: not a ktpt-truth 1 file")
            for line in f:
                p = line.split()
                if not p:
                    continue
                if p[0] == "n" and len(p) == 5:
                    nodes[int(p[1])] = (int(p[2]), p[3] == "i", int(p[4], 16))
                elif p[0] == "b" and len(p) == 4:
                    start = int(p[2], 16)
                    blocks[int(p[1])] = [start + int(o) for o in p[3].split(",")]
                elif p[0] == "c" and len(p) == 4:
                    counts.append((int(p[1]), int(p[2]), int(p[3])))
                elif p[0] == "e" and len(p) == 5:
                    frm, to, kind, n = int(p[1], 16), int(p[2], 16), p[3], int(p[4])
                    g, g_start = syms.at(to)
                    f_from = syms.at(frm)[0]
                    if THUNK.match(g):
                        continue  # counted when the thunk is left
                    if kind == "call":
                        if to == g_start or f_from != g:
                            calls[g] += n
                    elif THUNK.match(f_from) or kind == "jump":
                        if to == g_start and f_from != g:
                            calls[g] += n  # out of a thunk, or a tail call
                elif p[0] == "unseen_call_returns" and len(p) == 2:
                    unseen_returns[0] += int(p[1])
                elif p[0] == "incomplete":
                    raise ValueError(f"{path}: the plugin's truth is incomplete ({' '.join(p[1:])}: its node limit)")
                elif p[0] == "end":
                    ended = True
                else:
                    raise ValueError(f"{path}: bad line {line.strip()[:80]!r}")
        if not ended:
            raise ValueError(f"{path}: no end record (truncated)")
        paths_of = {0: (), 1: ("[base_unknown]",)}

        def path_of(n):
            chain = []
            while n not in paths_of:
                if n not in nodes:
                    raise ValueError(f"{path}: node {n} is not defined")
                chain.append(n)
                n = nodes[n][0]
                if len(chain) > 100000:
                    raise ValueError(f"{path}: node {chain[0]} loops")
            base = paths_of[n]
            for m in reversed(chain):
                parent, interrupt, ret = nodes[m]
                if interrupt:
                    frame = syms.at(ret)[0] if ret else "[unresolved]"
                else:
                    frame = syms.at(ret - 1)[0]
                base = base + (frame,)
                paths_of[m] = base
            return base

        runs_of = {}  # block -> [(function, instructions)], consecutive instructions of one function merged

        def runs(block):
            r = runs_of.get(block)
            if r is None:
                r = []
                for addr in blocks[block]:
                    fn = syms.at(addr)[0]
                    if r and r[-1][0] == fn:
                        r[-1][1] += 1
                    else:
                        r.append([fn, 1])
                runs_of[block] = r
            return r

        for node, block, n in counts:
            if block not in blocks:
                raise ValueError(f"{path}: block {block} is not defined")
            base = path_of(node)
            for fn, k in runs(block):
                if "[unresolved]" in base:
                    unresolved += n * k
                stacks[base + (fn,)] += n * k
                functions[fn] += n * k
    return stacks, functions, calls, unresolved, unseen_returns[0]


def read_folded(path):
    stacks = defaultdict(int)
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line:
            continue
        s, n = line.rsplit(" ", 1)
        stacks[tuple(normalise(x) for x in s.split(";"))] += int(n)
    return stacks


def main(argv):
    args, opts = [], {}
    i = 1
    while i < len(argv):
        if argv[i].startswith("--"):
            opts[argv[i][2:]] = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    bundle, folded, report_path, truths = args[0], args[1], args[2], args[3:]
    try:
        syms = Symbols(bundle + "/kallsyms", bundle + "/modules")
        t_stacks, t_fn, t_calls, unresolved, unseen_returns = read_truth(truths, syms)
        d_stacks = read_folded(folded)
        report = json.load(open(report_path))
    except (OSError, ValueError, KeyError) as e:
        print(f"check-stacks: {e}", file=sys.stderr)
        return 2
    d_fn, d_calls = defaultdict(int), defaultdict(int)
    for f in report["functions"]:
        key = normalise(f["key"].replace(";", ":").replace(" ", "_"))
        d_fn[key] += f["insns"]
        d_calls[key] += f["calls"]
    t_total, d_total = sum(t_stacks.values()), sum(d_stacks.values())
    exact = sum(min(n, d_stacks.get(p, 0)) for p, n in t_stacks.items())
    known = {p: n for p, n in t_stacks.items() if p[0] != "[base_unknown]"}
    exact_known = sum(min(n, d_stacks.get(p, 0)) for p, n in known.items())
    both = sum(min(n, d_fn.get(f, 0)) for f, n in t_fn.items())
    off = sorted(((abs(d_fn.get(f, 0) - n) / n, f, n, d_fn.get(f, 0)) for f, n in t_fn.items()
                  if n >= 10000 and abs(d_fn.get(f, 0) - n) > n * 1e-4), reverse=True)
    compared = [(f, n) for f, n in t_calls.items() if n >= 100]
    calls_off = sorted(((abs(d_calls.get(f, 0) - n), f, n, d_calls.get(f, 0)) for f, n in compared
                        if d_calls.get(f, 0) != n), reverse=True)
    out = {
        "truth_insns": t_total, "kthost_insns": d_total,
        "exact_share": exact / t_total if t_total else 0.0,
        "exact_share_known_base": exact_known / sum(known.values()) if known else 0.0,
        "truth_base_unknown_share": 1 - sum(known.values()) / t_total if t_total else 0.0,
        "kthost_base_unknown_share": sum(n for p, n in d_stacks.items() if p[0] == "[base_unknown]") / d_total
        if d_total else 0.0,
        "unresolved_interrupt_insns": unresolved,
        "truth_unseen_call_returns": unseen_returns,
        "function_precision": both / sum(d_fn.values()) if d_fn else 0.0,
        "function_recall": both / sum(t_fn.values()) if t_fn else 0.0,
        "functions_off": len(off),
        "calls_compared": len(compared), "calls_equal": len(compared) - len(calls_off),
        "deepest_truth": max((len(p) for p in t_stacks), default=0),
        "deepest_kthost": max((len(p) for p in d_stacks), default=0),
    }
    print(f"stacks: {out['exact_share']:.4%} of {t_total} true instructions on exactly the true stack "
          f"({out['exact_share_known_base']:.4%} where the truth knows the base); kthost {d_total} instructions")
    print(f"  base unknown: truth {out['truth_base_unknown_share']:.2%}, kthost {out['kthost_base_unknown_share']:.2%}; "
          f"deepest stack: truth {out['deepest_truth']}, kthost {out['deepest_kthost']} frames; "
          f"truth saw {unseen_returns} returns of calls it did not see")
    print(f"functions: precision {out['function_precision']:.4%}, recall {out['function_recall']:.4%}; "
          f"{len(off)} of {sum(1 for n in t_fn.values() if n >= 10000)} functions with >= 10000 instructions off by > 0.01%")
    for r, f, n, d in off[:8]:
        print(f"  {f}: truth {n}, kthost {d} ({r:+.3%})")
    print(f"calls: {out['calls_equal']} of {len(compared)} functions with >= 100 true calls have the true count")
    for diff, f, n, d in calls_off[:8]:
        print(f"  {f}: truth {n}, kthost {d}")
    worst = sorted(((n - d_stacks.get(p, 0), p) for p, n in known.items() if n > d_stacks.get(p, 0)), reverse=True)
    for n, p in worst[:5]:
        print(f"  missing (known base) {n}: {';'.join(p)[-300:]}")
    if "json" in opts:
        with open(opts["json"], "w") as f:
            json.dump(out, f, indent=2)
    ok = True
    if "min-exact" in opts and out["exact_share"] < float(opts["min-exact"]):
        print(f"check-stacks: exact share {out['exact_share']:.4%} < {float(opts['min-exact']):.4%}")
        ok = False
    if "min-exact-known" in opts and out["exact_share_known_base"] < float(opts["min-exact-known"]):
        print(f"check-stacks: exact share where the truth knows the base {out['exact_share_known_base']:.4%} < "
              f"{float(opts['min-exact-known']):.4%}")
        ok = False
    if "min-function-recall" in opts and min(out["function_recall"], out["function_precision"]) < float(opts["min-function-recall"]):
        print("check-stacks: function precision or recall below " + opts["min-function-recall"])
        ok = False
    if "max-deepest-excess" in opts and out["deepest_kthost"] > out["deepest_truth"] + int(opts["max-deepest-excess"]):
        print("check-stacks: kthost's deepest stack is deeper than the truth's")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
