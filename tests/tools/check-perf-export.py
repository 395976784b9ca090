#!/usr/bin/env python3
"""perf's own decoder as an independent check of kthost's.

usage: check-perf-export.py EXPORT_DIR REPORT_JSON [--cpu N] [--min N] [--tolerance F] [--bpf] [--json OUT]

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
3. BPF programs: on each compared vCPU, every program either decoder counted
   must have the same count in both (any count: programs run little, and
   perf reads their text from the export's BPF_PROG_INFO). With --bpf, BPF
   programs must have run (kthost counted some); when every vCPU they ran on
   had perf errors, that is said, and nothing about them is compared.
4. "Failed to get instruction" (perf found no text at an address) on a vCPU
   where neither decoder reports any other error is a failure: the export
   lacks text that kthost has. After an overflow or a desync it is where a
   lost decoder went, and is only listed.

Exit status 1 when a check fails; 3 when nothing failed but no vCPU could be
compared (every one had perf errors), or with --bpf, when BPF programs ran
only on vCPUs that could not be compared: the caller may trace again.
"""
import collections
import concurrent.futures
import json
import re
import subprocess
import sys

BPF_PROG_RE = re.compile(r"bpf_prog_[0-9a-f]{16}(_|$)")  # a JIT image, not a kernel function
IP_RE = re.compile(r" ip (0x[0-9a-f]+) ")
ERROR_RE = re.compile(r"instruction trace error type \d+ .*?cpu (-?\d+) .*?code (\d+): (.*)")


def perf_errors(export_dir):
    out = subprocess.run(["perf", "script", "-i", export_dir, "--itrace=e"], capture_output=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"FAIL  perf script --itrace=e exited {out.returncode}: {out.stderr.decode()[-500:]}")
    errors, ips = [], []
    for line in out.stdout.decode(errors="replace").splitlines():
        m = ERROR_RE.search(line)
        if m:
            errors.append((int(m.group(1)), m.group(3).strip()))
            ip = IP_RE.search(line)
            if ip and "Failed to get" in m.group(3):
                ips.append((int(m.group(1)), ip.group(1)))
    return errors, ips


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
    pos, want_bpf = [], False
    while args:
        a = args.pop(0)
        if a == "--bpf":
            want_bpf = True
        elif a in opts and args:
            opts[a] = args.pop(0)
        else:
            pos.append(a)
    if len(pos) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    export_dir, report_path = pos
    min_insns, tol = int(opts["--min"]), float(opts["--tolerance"])
    report = json.load(open(report_path))

    errors, errors_ips = perf_errors(export_dir)
    by_kind = collections.Counter(msg for _, msg in errors)
    ke = {k: v for k, v in report.get("errors", {}).items() if k not in ("examples", "skipped_bytes")}
    print(f"decode errors: perf {len(errors)} ({', '.join(f'{n} {m}' for m, n in by_kind.most_common()) or 'none'}); "
          f"kthost {sum(v for v in ke.values() if isinstance(v, int))} ({', '.join(f'{v} {k}' for k, v in ke.items())})")

    cpus = sorted({int(c) for f in report["functions"] for c in f.get("cpus", {})})
    if opts["--cpu"]:
        cpus = [int(opts["--cpu"])]
    errored = collections.defaultdict(collections.Counter)
    for c, msg in errors:
        errored[c][msg] += 1
    failures, compared, result = 0, 0, {"errors": dict(by_kind), "cpus": {}}
    kthost_errored = {e.get("cpu") for e in report.get("errors", {}).get("examples", [])}
    for c in sorted(errored):
        if set(errored[c]) == {"Failed to get instruction"} and c not in kthost_errored:
            ips = [line for cpu_, line in errors_ips if cpu_ == c][:10]
            print(f"FAIL  vCPU {c}: perf found no text {errored[c]['Failed to get instruction']} times, with no "
                  f"other error before: the export lacks text there ({', '.join(ips)})")
            failures += 1

    def close(a, b):
        return abs(a - b) <= tol * max(a, b)

    # Which vCPUs are compared, and how; perf decodes them all at once.
    plan = {}
    for cpu in cpus:
        what = ", ".join(f"{n} {m}" for m, n in errored[cpu].most_common()) if errored.get(cpu) else ""
        if what and any("match instruction" not in m for m in errored[cpu]):
            print(f"vCPU {cpu}: not compared: perf reports decode errors there ({what}); after an overflow "
                  f"or a misdecoded loop the decoders go separate ways")
            result["cpus"][cpu] = "decode errors: " + what
            continue
        plan[cpu] = what
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(plan))) as pool:
        decoded = {cpu: pool.submit(perf_counts, export_dir, cpu) for cpu in plan}
        decoded = {cpu: f.result() for cpu, f in decoded.items()}

    for cpu, what in plan.items():
        totals_only = bool(what)
        if totals_only:
            print(f"vCPU {cpu}: perf reports {what}; after each the decoders resume at different packets, "
                  f"so only the total is held to the tolerance here")
        compared += 1
        per_start, names, unknown = decoded[cpu]
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
        # BPF programs at any count (they run little, and perf gets their text
        # from the export's BPF_PROG_INFO, kthost from its own store).
        bpf = {k for k in set(per_start) | set(ours)
               if isinstance(k, int) and BPF_PROG_RE.match(names.get(k) or our_names.get(k) or "")}
        bpf_differ = sorted(k for k in bpf if per_start.get(k, 0) != ours.get(k, 0))
        ran = [k for k in bpf if per_start.get(k, 0) or ours.get(k, 0)]
        label = "ok  " if not bpf_differ else "note" if totals_only else "FAIL"
        print(f"{label}  vCPU {cpu}: {len(ran)} BPF programs ran: perf {sum(per_start.get(k, 0) for k in bpf)} "
              f"instructions in them, kthost {sum(ours.get(k, 0) for k in bpf)}; {len(bpf_differ)} differ")
        for k in bpf_differ[:20]:
            print(f"      {hex(k)} {names.get(k) or our_names.get(k)}: perf {per_start.get(k, 0)}, kthost {ours.get(k, 0)}")
        failures += (not ok_total) + (bool(differ) and not totals_only) + (bool(bpf_differ) and not totals_only)
        result["cpus"][cpu] = {"bpf_programs_ran": len(ran), "bpf_differ": len(bpf_differ),"perf": total, "kthost": our_total, "functions": len(keys), "exact": exact,
                               "differ": [{"start": hex(k) if isinstance(k, int) else k,
                                           "name": names.get(k) or our_names.get(k), "perf": a, "kthost": b}
                                          for _, k, a, b in differ]}
    nothing_compared = compared == 0
    if nothing_compared:
        print("none  no vCPU could be compared: perf reports errors on every one")
    if want_bpf:
        bpf_cpus = sorted({int(c) for f in report["functions"] if BPF_PROG_RE.match(f["name"])
                           for c, n in f.get("cpus", {}).items() if n > 0})
        checked = [c for c in bpf_cpus if c in plan]
        if not bpf_cpus and ke.get("overflow", 0) > 0:
            # The software PT plugin drops a frame it cannot resolve as an
            # overflow (counted in kthost's errors and in perf's): the BPF
            # runs may sit in such a gap. Lost and counted, not misdecoded.
            print(f"none  --bpf: kthost counted no instruction in any BPF program, and its decode has "
                  f"{ke['overflow']} overflows (PT the plugin could not deliver): not compared in this run")
            nothing_compared = True
        elif not bpf_cpus:
            print("FAIL  --bpf: kthost counted no instruction in any BPF program (did the workload run them?)")
            failures += 1
        elif not checked:
            print(f"none  BPF programs ran on vCPU {', '.join(map(str, bpf_cpus))} only, where perf reports "
                  f"decode errors: they are not compared in this run")
            nothing_compared = True
        else:
            print(f"ok    BPF programs compared on vCPU {', '.join(map(str, checked))} "
                  f"(of {', '.join(map(str, bpf_cpus))}, where they ran)")
        result["bpf_cpus"], result["bpf_compared_cpus"] = bpf_cpus, checked
    if opts["--json"]:
        json.dump(result, open(opts["--json"], "w"), indent=1)
    return 1 if failures else 3 if nothing_compared else 0


if __name__ == "__main__":
    sys.exit(main())
