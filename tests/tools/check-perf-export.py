#!/usr/bin/env python3
"""perf's own decoder as an independent check of kthost's.

usage: check-perf-export.py EXPORT_DIR REPORT_JSON [--cpu N] [--min N] [--tolerance F] [--json OUT]

EXPORT_DIR is what `kthost export BUNDLE -o EXPORT_DIR` wrote; REPORT_JSON is
`kthost report BUNDLE --json --top 1000000`. Debian's perf (linux-perf)
decodes the export with its own Intel PT decoder, which shares no code with
libipt or kthost.

1. Decode errors: `perf script --itrace=e` lists perf's, by vCPU and kind;
   they are printed beside kthost's counts.
2. Instructions: for each vCPU (or only --cpu N), `perf script --itrace=i1i
   -F ip,sym,symoff` gives every instruction; they are counted per function
   start address (ip - symbol offset), as kthost's report counts them, so two
   names for one address (aliases) do not matter. The vCPU's total must
   agree within the tolerance (default 0.1%), and so must every function
   with at least --min instructions (default 10000) on either side; each one
   that disagrees is listed with both counts.
   A vCPU where perf reports decode errors is compared less, and says so:
   after an error each decoder resumes at a different packet (perf at the
   next IP, kthost at the next PSB), so around it their counts differ by
   design. With only desyncs ("Trace doesn't match instruction") its total
   must still agree within the tolerance, and the functions that differ are
   listed but not held against it. After an overflow or a never-ending loop
   it is not compared (perf may walk a misdecoded loop for billions of
   instructions). At least one vCPU must be compared.

Exit status 1 when a check fails.
"""
import collections
import json
import re
import subprocess
import sys

ERROR_RE = re.compile(r"instruction trace error type \d+ .*?cpu (-?\d+) .*?code (\d+): (.*)")


def perf_errors(export_dir):
    out = subprocess.run(["perf", "script", "-i", export_dir, "--itrace=e"], capture_output=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"FAIL  perf script --itrace=e exited {out.returncode}: {out.stderr.decode()[-500:]}")
    errors = []
    for line in out.stdout.decode(errors="replace").splitlines():
        m = ERROR_RE.search(line)
        if m:
            errors.append((int(m.group(1)), m.group(3).strip()))
    return errors


def perf_counts(export_dir, cpu):
    cmd = ["perf", "script", "-i", export_dir, "--itrace=i1i", "-F", "ip,sym,symoff", "--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = collections.Counter()
    for line in proc.stdout:
        lines[line] += 1
    err = proc.stderr.read().decode(errors="replace")
    if proc.wait() != 0:
        raise SystemExit(f"FAIL  {' '.join(cmd)} exited {proc.returncode}: {err[-500:]}")
    per_start, names, unknown = collections.Counter(), {}, 0
    for line, n in lines.items():
        parts = line.decode(errors="replace").split(None, 1)
        try:
            ip = int(parts[0], 16)
        except (ValueError, IndexError):
            continue
        sym = parts[1].strip() if len(parts) > 1 else "[unknown]"
        if sym.startswith("[unknown]"):
            unknown += n
            per_start["unknown"] += n
            continue
        name, sep, off = sym.rpartition("+0x")
        if not sep:
            name, off = sym, "0"
        start = ip - int(off, 16)
        per_start[start] += n
        names[start] = name
    return per_start, names, unknown


def main():
    args = sys.argv[1:]
    opts = {"--min": "10000", "--tolerance": "0.001", "--json": "", "--cpu": ""}
    pos = []
    while args:
        a = args.pop(0)
        if a in opts and args:
            opts[a] = args.pop(0)
        else:
            pos.append(a)
    if len(pos) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    export_dir, report_path = pos
    min_insns, tol = int(opts["--min"]), float(opts["--tolerance"])
    report = json.load(open(report_path))

    errors = perf_errors(export_dir)
    by_kind = collections.Counter(msg for _, msg in errors)
    ke = {k: v for k, v in report.get("errors", {}).items() if k != "examples"}
    print(f"decode errors: perf {len(errors)} ({', '.join(f'{n} {m}' for m, n in by_kind.most_common()) or 'none'}); "
          f"kthost {sum(v for v in ke.values() if isinstance(v, int))} ({', '.join(f'{v} {k}' for k, v in ke.items())})")

    cpus = sorted({int(c) for f in report["functions"] for c in f.get("cpus", {})})
    if opts["--cpu"]:
        cpus = [int(opts["--cpu"])]
    errored = collections.defaultdict(collections.Counter)
    for c, msg in errors:
        errored[c][msg] += 1
    failures, compared, result = 0, 0, {"errors": dict(by_kind), "cpus": {}}

    def close(a, b):
        return abs(a - b) <= tol * max(a, b)

    for cpu in cpus:
        totals_only = False
        if errored.get(cpu):
            what = ", ".join(f"{n} {m}" for m, n in errored[cpu].most_common())
            if any("match instruction" not in m for m in errored[cpu]):
                print(f"vCPU {cpu}: not compared: perf reports decode errors there ({what}); after an overflow "
                      f"or a misdecoded loop the decoders go separate ways")
                result["cpus"][cpu] = "decode errors: " + what
                continue
            print(f"vCPU {cpu}: perf reports {what}; after each the decoders resume at different packets, "
                  f"so only the total is held to the tolerance here")
            totals_only = True
        compared += 1
        per_start, names, unknown = perf_counts(export_dir, cpu)
        ours, our_names = collections.Counter(), {}
        for f in report["functions"]:
            key = int(f["start"], 16) if f.get("start") else "unknown"
            ours[key] += f.get("cpus", {}).get(str(cpu), 0)
            our_names.setdefault(key, f["name"])
        total, our_total = sum(per_start.values()), sum(ours.values())
        ok_total = close(total, our_total)
        print(f"vCPU {cpu}: perf decoded {total} instructions, kthost {our_total} "
              f"({total - our_total:+d}, {(total - our_total) / max(our_total, 1) * 100:+.4f}%); "
              f"{unknown} of perf's in no symbol")
        print(f"{'ok  ' if ok_total else 'FAIL'}  vCPU {cpu}: total within {tol * 100:g}%")
        keys = {k for k, v in per_start.items() if v >= min_insns} | {k for k, v in ours.items() if v >= min_insns}
        differ = sorted(((abs(per_start.get(k, 0) - ours.get(k, 0)), k, per_start.get(k, 0), ours.get(k, 0))
                         for k in keys if not close(per_start.get(k, 0), ours.get(k, 0))), reverse=True)
        exact = sum(1 for k in keys if per_start.get(k, 0) == ours.get(k, 0))
        label = "ok  " if not differ else "note" if totals_only else "FAIL"
        print(f"{label}  vCPU {cpu}: {len(keys)} functions with >= {min_insns} "
              f"instructions; {len(keys) - len(differ)} agree within {tol * 100:g}% ({exact} exactly), "
              f"{len(differ)} differ")
        for _, k, a, b in differ[:40]:
            name = names.get(k) or our_names.get(k) or "?"
            where = hex(k) if isinstance(k, int) else "unknown"
            print(f"      {where} {name}: perf {a}, kthost {b} ({(a - b) / max(b, 1) * 100:+.2f}%)")
        failures += (not ok_total) + (bool(differ) and not totals_only)
        result["cpus"][cpu] = {"perf": total, "kthost": our_total, "functions": len(keys), "exact": exact,
                               "differ": [{"start": hex(k) if isinstance(k, int) else k,
                                           "name": names.get(k) or our_names.get(k), "perf": a, "kthost": b}
                                          for _, k, a, b in differ]}
    if compared == 0:
        print("FAIL  no vCPU could be compared: every one overflowed or looped")
        failures += 1
    if opts["--json"]:
        json.dump(result, open(opts["--json"], "w"), indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
