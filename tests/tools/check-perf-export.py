#!/usr/bin/env python3
"""perf's own decoder as an independent check of kthost's.

usage: check-perf-export.py EXPORT_DIR REPORT_JSON [--cpu N] [--min N] [--tolerance F] [--json OUT]

EXPORT_DIR is what `kthost export BUNDLE -o EXPORT_DIR` wrote; REPORT_JSON is
`kthost report BUNDLE --json --top 1000000`. Debian's perf (linux-perf)
decodes the export with its own Intel PT decoder, which shares no code with
libipt or kthost: `perf script --itrace=i1ie -F ip,sym,symoff` gives every
instruction and every decode error. Instructions are counted per function
start address (ip - symbol offset), as kthost's report counts them, so that
two names for one address (aliases) do not matter.

Checks: the total agrees within the tolerance (default 0.1%), and so does
every function with at least --min instructions (default 10000) on either
side. Every function that disagrees is listed with both counts. perf's
decode errors are counted and printed beside kthost's. Exit status 1 when a
check fails.
"""
import collections
import json
import re
import subprocess
import sys


def main():
    args = sys.argv[1:]
    opts = {"--min": "10000", "--tolerance": "0.001", "--json": "", "--cpu": ""}
    pos = []
    while args:
        a = args.pop(0)
        if a in opts:
            opts[a] = args.pop(0)
        else:
            pos.append(a)
    if len(pos) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    export_dir, report_path = pos
    min_insns, tol = int(opts["--min"]), float(opts["--tolerance"])
    report = json.load(open(report_path))

    # perf: every instruction, by function start; decode errors by message.
    per_start = collections.Counter()
    names = {}
    errors = collections.Counter()
    error_re = re.compile(r"instruction trace error type \d+ .*code (\d+): (.*)")
    total = 0
    unknown = 0
    cmd = ["perf", "script", "-i", export_dir, "--itrace=i1ie", "-F", "ip,sym,symoff"]
    if opts["--cpu"]:
        cmd += ["--cpu", opts["--cpu"]]
    proc = subprocess.Popen(cmd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = collections.Counter()
    for line in proc.stdout:
        lines[line] += 1
    err_text = proc.stderr.read().decode(errors="replace")
    if proc.wait() != 0:
        print(err_text[-2000:], file=sys.stderr)
        print(f"FAIL  perf script exited {proc.returncode}")
        return 1
    for line, n in lines.items():
        text = line.decode(errors="replace").strip()
        m = error_re.search(text)
        if m:
            errors[m.group(2).strip()] += n
            continue
        parts = text.split(None, 1)
        if not parts:
            continue
        try:
            ip = int(parts[0], 16)
        except ValueError:
            continue
        total += n
        sym = parts[1] if len(parts) > 1 else "[unknown]"
        if sym.startswith("[unknown]"):
            unknown += n
            per_start[("unknown", 0)] += n
            continue
        name, _, off = sym.rpartition("+0x")
        if not name:
            name, off = sym, "0"
        start = ip - int(off, 16)
        per_start[start] += n
        names[start] = name

    ours = collections.Counter()
    our_names = {}
    for f in report["functions"]:
        start = int(f["start"], 16) if f.get("start") else None
        key = start if start is not None else ("unknown", 0)
        n = f["cpus"].get(opts["--cpu"], 0) if opts["--cpu"] else f["insns"]
        ours[key] += n
        our_names.setdefault(key, f["name"])
    our_total = sum(ours.values()) if opts["--cpu"] else report["insns"]

    failures = 0

    def close(a, b):
        return abs(a - b) <= tol * max(a, b)

    print(f"perf decoded {total} instructions, kthost {our_total}: "
          f"{(total - our_total) / max(our_total, 1) * 100:+.3f}%")
    if not close(total, our_total):
        failures += 1
        print(f"FAIL  total instructions differ by more than {tol * 100:g}%")
    else:
        print(f"ok    total instructions within {tol * 100:g}%")
    keys = set(k for k, v in per_start.items() if v >= min_insns) | set(k for k, v in ours.items() if v >= min_insns)
    differ = []
    for k in keys:
        a, b = per_start.get(k, 0), ours.get(k, 0)
        if not close(a, b):
            differ.append((abs(a - b), k, a, b))
    differ.sort(reverse=True)
    print(f"functions with >= {min_insns} instructions on either side: {len(keys)}; "
          f"{len(keys) - len(differ)} agree within {tol * 100:g}%, {len(differ)} differ")
    for _, k, a, b in differ[:40]:
        name = names.get(k) or our_names.get(k) or "?"
        where = hex(k) if isinstance(k, int) else "unknown"
        print(f"      {where} {name}: perf {a}, kthost {b} ({(a - b) / max(b, 1) * 100:+.2f}%)")
    if differ:
        failures += 1
        print("FAIL  per-function instruction counts differ")
    else:
        print(f"ok    every function with >= {min_insns} instructions agrees")
    print(f"perf: {unknown} instructions in no symbol; {sum(errors.values())} decode errors")
    for msg, n in errors.most_common(10):
        print(f"      {n} x {msg}")
    ke = report.get("errors", {})
    print(f"kthost: decode errors {json.dumps(ke.get('counts', ke) if isinstance(ke, dict) else ke)[:300]}")
    if opts["--json"]:
        json.dump({"perf_total": total, "kthost_total": our_total, "perf_errors": dict(errors),
                   "differ": [{"start": hex(k) if isinstance(k, int) else "unknown",
                               "name": names.get(k) or our_names.get(k), "perf": a, "kthost": b}
                              for _, k, a, b in differ]}, open(opts["--json"], "w"), indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
