#!/usr/bin/env python3
"""Checks the symbols kthost used for a report against the guest kernel's own view.

  check-symbols.py BUNDLE REPORT_JSON GUEST_KALLSYMS PROBE_OUT

GUEST_KALLSYMS is the guest's /proc/kallsyms, read at the end of the test
(after the trace). PROBE_OUT is what `ktprobe bpf-stress --out FILE` wrote in
the guest: "prog <index> <id> <kind> 0x<addr> <len> <hex>" per program, from
BPF_OBJ_GET_INFO_BY_FD. Everything is parsed here, sharing no code with kthost.

1. The bundle's static symbols (the kallsyms kthost decodes with) equal the
   guest's text symbols (t, T, w, W) of the core kernel and of every module
   loaded at the end, address, name and module alike. BPF programs and other
   [bpf] / [__builtin__*] entries come and go during a trace and are checked
   by 3.
2. Every function of the report in the core kernel or in such a module is a
   guest text symbol at the same address with the same name.
3. Every BPF program of the report named kts_<kind>_<index> (ktprobe's) is at
   the address the guest kernel gave for that program.
Exit status 0 when all hold, 1 when any does not, 2 on unreadable input.
"""
import json
import sys

TEXT_TYPES = set("tTwW")


def read_kallsyms(path):
    """(addr, name, module) of text symbols; module "" for the core kernel."""
    out = set()
    with open(path, encoding="ascii", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split(None, 3)
            if len(parts) < 3 or len(parts[1]) != 1 or parts[1] not in TEXT_TYPES:
                continue
            mod = ""
            if len(parts) == 4:
                m = parts[3].strip()
                if not (m.startswith("[") and m.endswith("]")):
                    continue
                mod = m[1:-1]
            if mod == "bpf" or mod.startswith("__builtin__"):
                continue
            out.add((int(parts[0], 16), parts[2], mod))
    return out


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    bundle, report_path, guest_path, probe_path = argv[1:]
    try:
        kthost_syms = read_kallsyms(bundle + "/kallsyms")
        guest_syms = read_kallsyms(guest_path)
        report = json.load(open(report_path))
        progs = []
        for line in open(probe_path):
            p = line.split()
            if len(p) >= 6 and p[0] == "prog":
                progs.append((int(p[1]), p[3], int(p[4], 16)))
    except (OSError, ValueError) as e:
        print(f"check-symbols: unreadable input: {e}", file=sys.stderr)
        return 2
    failures = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)

    end_modules = {m for _, _, m in guest_syms if m}
    static = {s for s in kthost_syms if s[2] == "" or s[2] in end_modules}
    missing = sorted(guest_syms - static)
    extra = sorted(static - guest_syms)
    core = sum(1 for s in guest_syms if not s[2])
    check(not missing and not extra,
          f"bundle symbols equal the guest's /proc/kallsyms: {core} core and {len(guest_syms) - core} module "
          f"text symbols ({len(end_modules)} modules); {len(missing)} missing, {len(extra)} extra"
          + (f" (e.g. missing {[(hex(a), n, m) for a, n, m in missing[:3]]}, extra "
             f"{[(hex(a), n, m) for a, n, m in extra[:3]]})" if missing or extra else ""))

    by_addr_name = {(a, n, m) for a, n, m in guest_syms}
    checked = wrong = 0
    examples = []
    bpf_checked = bpf_wrong = 0
    prog_addr = {f"kts_{kind}_{index}": addr for index, kind, addr in progs}
    for f in report["functions"]:
        name, mod, start = f["name"], f["module"], int(f["start"], 16)
        if name.startswith("["):
            continue
        if mod == "bpf":
            tail = name.split("_kts_", 1)
            if len(tail) == 2 and "kts_" + tail[1] in prog_addr:
                bpf_checked += 1
                if prog_addr["kts_" + tail[1]] != start:
                    bpf_wrong += 1
                    examples.append((name, hex(start), hex(prog_addr["kts_" + tail[1]])))
            continue
        m = "" if mod == "kernel" else mod
        if m and m not in end_modules:
            continue
        checked += 1
        if (start, name, m) not in by_addr_name:
            wrong += 1
            examples.append((name, mod, hex(start)))
    check(checked > 0 and wrong == 0,
          f"report functions at the guest's own addresses: {checked} checked, {wrong} differ"
          + (f" (e.g. {examples[:3]})" if wrong else ""))
    check(bpf_checked > 0 and bpf_wrong == 0,
          f"BPF programs at the addresses the guest kernel gave: {bpf_checked} checked, {bpf_wrong} differ"
          + (f" (e.g. {examples[:3]})" if bpf_wrong else ""))
    # ktprobe runs every tracing program it attaches (fentry/fexit: --calls
    # times through its trampoline); socket and xdp programs are only loaded.
    # Each one that ran must be decoded, not just some.
    ran = {f"kts_{kind}_{index}" for index, kind, _ in progs if kind in ("fentry", "fexit")}
    seen = {"kts_" + f["name"].split("_kts_", 1)[1] for f in report["functions"]
            if f["module"] == "bpf" and "_kts_" in f["name"]}
    not_decoded = sorted(ran - seen)
    check(not not_decoded,
          f"every BPF program that ran is in the report: {len(ran) - len(not_decoded)} of {len(ran)}"
          + (f" (missing {not_decoded[:5]})" if not_decoded else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
