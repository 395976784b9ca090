#!/usr/bin/env python3
"""Checks the source lines of `kthost report --vmlinux VMLINUX --json` against LLVM and binutils.

  check-source-lines.py VMLINUX REPORT_JSON [--min-share PERCENT]

kthost reads DWARF through elfutils' libdw and places the guest's functions at
their KASLR-shifted addresses. This check shares none of that: the function's
address in the file comes from `nm` (binutils' own ELF reader), and its
file:line from `llvm-addr2line` (LLVM's DWARF reader) at that address.

1. Every core-kernel function of the report that has a "source" names the
   same file (by path suffix: one side may be relative to the build tree) and
   the same line as llvm-addr2line gives for the function's address in VMLINUX.
2. At least --min-share percent (default 90) of the report's core-kernel
   functions that nm knows have a "source" at all.
Exit status 0 when both hold, 1 when either does not, 2 on unreadable input.
"""
import json
import re
import subprocess
import sys

# LLVM's DWARF reader (clang-14's llvm-addr2line). Not binutils' addr2line:
# version 2.40 (Debian 12) names the compilation unit's own file instead of
# the header for out-of-line copies of inline functions in DWARF 5 line
# tables (xa_is_node at lib/xarray.c:171, which is include/linux/xarray.h:171).
ADDR2LINE = "llvm-addr2line-14"


def nm_text_symbols(vmlinux):
    """name -> address of the text symbols; a name defined twice is dropped."""
    out = subprocess.run(["nm", "--defined-only", vmlinux], capture_output=True, text=True, check=True).stdout
    addrs, dups = {}, set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[1] not in "tTwW":
            continue
        addr, name = int(parts[0], 16), parts[2]
        if name in addrs and addrs[name] != addr:
            dups.add(name)
        addrs[name] = addr
    for name in dups:
        del addrs[name]
    return addrs


def addr2line(vmlinux, addrs):
    """address -> "file:line" (None when unknown), one addr2line run."""
    if not addrs:
        return {}
    text = "".join("%x\n" % a for a in addrs)
    out = subprocess.run([ADDR2LINE, "-e", vmlinux, "-a"], input=text, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    result, i = {}, 0
    while i + 1 < len(out):
        addr = int(out[i], 16)
        loc = re.sub(r" \(discriminator \d+\)$", "", out[i + 1].strip())
        result[addr] = None if loc.startswith("??") or loc.endswith(":?") or loc.endswith(":0") else loc
        i += 2
    return result


def split_loc(loc):
    path, _, line = loc.rpartition(":")
    return path, line


def same_place(a, b):
    pa, la = split_loc(a)
    pb, lb = split_loc(b)
    if la != lb:
        return False
    pa, pb = pa.lstrip("./"), pb.lstrip("./")
    return pa.endswith(pb) or pb.endswith(pa)


def main():
    args = sys.argv[1:]
    min_share = 90.0
    if "--min-share" in args:
        i = args.index("--min-share")
        min_share = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    vmlinux, report_path = args
    try:
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
        symbols = nm_text_symbols(vmlinux)
    except (OSError, ValueError, subprocess.CalledProcessError) as e:
        print("check-source-lines: cannot read input: %s" % e, file=sys.stderr)
        return 2
    functions = [f for f in report.get("functions", [])
                 if f.get("module") in ("", "kernel") and f.get("name") in symbols]
    if not functions:
        print("check-source-lines: FAIL: the report has no core-kernel function that nm knows")
        return 1
    truth = addr2line(vmlinux, sorted({symbols[f["name"]] for f in functions}))
    with_source = [f for f in functions if f.get("source")]
    wrong = []
    for f in with_source:
        expected = truth.get(symbols[f["name"]])
        if expected is None or not same_place(f["source"], expected):
            wrong.append("%s: kthost %s, llvm-addr2line %s" % (f["name"], f["source"], expected))
    share = 100.0 * len(with_source) / len(functions)
    print("source lines: %d of %d core-kernel functions have one (%.1f%%); %d differ from llvm-addr2line"
          % (len(with_source), len(functions), share, len(wrong)))
    for w in wrong[:10]:
        print("  differs: " + w)
    ok = not wrong and share >= min_share
    if share < min_share:
        print("check-source-lines: FAIL: %.1f%% of functions have a source line, under %.1f%%" % (share, min_share))
    if wrong:
        print("check-source-lines: FAIL: %d source lines differ from llvm-addr2line" % len(wrong))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
