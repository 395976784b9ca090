#!/usr/bin/env python3
"""Checks a scripts/kthost-ci.sh output directory (tests/vm/run-regress.sh).

  check-regression.py injected DIR STATUS KO_BASE:LOOPS KO_NEW:LOOPS CALLS
  check-regression.py same DIR STATUS
  check-regression.py kernels DIR STATUS

injected: the truth is the module's own machine code. objdump -d of each
ktregress.ko gives ktregress_work's instructions; the one backward branch
marks the loop; one call runs the instructions before the loop once, the loop
body LOOPS times and the instructions after it once. CALLS calls per run.
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def instructions_per_call(ko, loops):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", ko], check=True, capture_output=True,
                         text=True).stdout
    body = out.split("<ktregress_work>:\n", 1)[1].split("\n\n", 1)[0]
    insns = []
    for line in body.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2), m.group(3)))
    back = [(i, int(t.group(1), 16)) for i, (a, op, arg) in enumerate(insns)
            if op.startswith("j") and (t := re.match(r"([0-9a-f]+) <", arg)) and int(t.group(1), 16) < a]
    if len(back) != 1:
        raise SystemExit(f"{ko}: want one backward branch in ktregress_work, found {len(back)}")
    jump, target = back[0]
    start = next(i for i, (a, _, _) in enumerate(insns) if a == target)
    # After the loop: straight on to the first ret or jmp (a return thunk).
    end = next(i for i in range(jump + 1, len(insns)) if insns[i][1].startswith(("ret", "jmp")))
    return start + loops * (jump - start + 1) + (end - jump)


def common(d):
    j = json.load(open(os.path.join(d, "regression.json")))
    junit = os.path.join(d, "junit.xml")
    check(subprocess.run(["xmllint", "--noout", junit]).returncode == 0, "junit.xml is well-formed (xmllint)")
    root = ET.parse(junit).getroot()
    suites = root.findall("testsuite")
    cases = [c for s in suites for c in s.findall("testcase")]
    sums_ok = root.tag == "testsuites" and int(root.get("tests")) == len(cases) and \
        int(root.get("failures")) == sum(len(c.findall("failure")) for c in cases) and \
        int(root.get("errors")) == sum(len(c.findall("error")) for c in cases) and \
        all(int(s.get("tests")) == len(s.findall("testcase")) and
            int(s.get("failures")) == sum(len(c.findall("failure")) for c in s.findall("testcase")) for s in suites)
    check(sums_ok, f"junit.xml: testsuites/testsuite/testcase/failure counts add up ({len(cases)} test cases)")
    for svg in ("base.svg", "new.svg", "diff.svg"):
        path = os.path.join(d, svg)
        png = path + ".png"
        ok = subprocess.run(["xmllint", "--noout", path]).returncode == 0 and \
            subprocess.run(["rsvg-convert", "-o", png, path]).returncode == 0 and os.path.getsize(png) > 1000
        check(ok, f"{svg} is well-formed and renders (rsvg-convert)")
    md = open(os.path.join(d, "summary.md")).read()
    for section in ("# kthost regression report", "**Verdict:", "## Regressions", "## Improvements",
                    "## Inclusive changes", "## Coverage", "## Runs: decode errors and losses"):
        check(section in md, f"summary.md has '{section}'")
    return j


# kthost's own footprint in a traced run, as an upper bound: every stack
# through its guest channel's driver (virtio_console: the helper's frames and
# the command's start and exit), its guard module, or any virtio interrupt
# (the channel's among them). Before PT waited for the command, the helper's
# state dump put 0.2-0.9% of a ktregress run's instructions in its virtio
# interrupts alone (own counts of vring_interrupt, vp_vring_interrupt and
# their callees).
# The median run must stay under 0.5%, and every run under 1% (#17's bound
# for the observer share). One run can spike: under TCG a vCPU thread the
# host did not schedule leaves the other spinning inside the channel's path
# (try_to_wake_up waiting for a task still switching out, in a
# vring_interrupt that wakes a port reader: 72k instructions in one run),
# which on a 20 M-instruction run is 0.5-1%.
FOOTPRINT_TAGS = ("[virtio_console]", "[ktguard]", "vring_interrupt")
FOOTPRINT_LIMIT = 0.005
FOOTPRINT_RUN_LIMIT = 0.01


def footprint(d):
    worst, medians, port_opens = 0.0, [], 0
    for side in ("base", "new"):
        runs = sorted(f for f in os.listdir(os.path.join(d, side)) if re.fullmatch(r"run-\d+\.folded", f))
        shares = []
        for name in runs:
            total = mine = 0
            for line in open(os.path.join(d, side, name)):
                stack, count = line.rsplit(" ", 1)
                total += int(count)
                if any(tag in stack for tag in FOOTPRINT_TAGS):
                    mine += int(count)
                if "port_fops_open" in stack or "port_fops_release" in stack:
                    port_opens += int(count)
            shares.append(mine / total if total else 1.0)
        worst = max([worst] + shares)
        print(f"      {side}: kthost's footprint per run (upper bound) " +
              " ".join(f"{x * 100:.3f}%" for x in shares))
        if shares:
            medians.append(sorted(shares)[len(shares) // 2])
    median = max(medians) if medians else 1.0
    check(median < FOOTPRINT_LIMIT, f"kthost's footprint under {FOOTPRINT_LIMIT * 100:.1f}% in the median run "
          f"of each side: worst median {median * 100:.3f}%")
    # The guest's helpers keep their virtio ports open: an open or close
    # sends a control message the guest busy-waits on (up to 260 k
    # instructions measured, when ktexec reopened its port for EOF).
    check(port_opens == 0, f"no virtio port opened or closed in a traced run: {port_opens} instructions")
    check(worst < FOOTPRINT_RUN_LIMIT, f"kthost's footprint under {FOOTPRINT_RUN_LIMIT * 100:.1f}% of every run: "
          f"worst {worst * 100:.3f}%")


def main():
    mode, d, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out = os.path.join(d, "diff")
    if not os.path.exists(os.path.join(out, "regression.json")):
        raise SystemExit(f"FAIL  {mode}: no {out}/regression.json (kthost-ci.sh exited {status})")
    j = common(out)
    footprint(d)
    for x in j.get("nearest", [])[:3]:
        print(f"      nearest its margin, not flagged: {x['name']} {x['kind']} {x['base']['mean']:.0f} -> "
              f"{x['new']['mean']:.0f} ({100 * x['margin_used']:.0f}% of its margin {x['margin']:.0f})")
    grew = [x for x in j["self"] if x["kind"] in ("grew", "new")]
    if mode == "injected":
        (ko_a, loops_a), (ko_b, loops_b) = [a.rsplit(":", 1) for a in sys.argv[4:6]]
        calls = int(sys.argv[6])
        want_a = calls * instructions_per_call(ko_a, int(loops_a))
        want_b = calls * instructions_per_call(ko_b, int(loops_b))
        check(status == 1, f"exit status 1 (regression): {status}")
        names = [x["name"] for x in j["self"]]
        check(names == ["ktregress_work [ktregress]"], f"exactly ktregress_work flagged: {names}")
        f = next((x for x in j["self"] if x["name"] == "ktregress_work [ktregress]"), None)
        if f:
            check(f["base"]["min"] == f["base"]["max"] == want_a,
                  f"base: {f['base']['min']:.0f}..{f['base']['max']:.0f} instructions per run, "
                  f"the machine code says {want_a}")
            check(f["new"]["min"] == f["new"]["max"] == want_b,
                  f"new: {f['new']['min']:.0f}..{f['new']['max']:.0f} instructions per run, "
                  f"the machine code says {want_b}")
            check(abs(f["factor"] - want_b / want_a) < 1e-9, f"factor {f['factor']:.4f} = {want_b / want_a:.4f}")
        # Inclusive: only ktregress_work and what called it, by the stacks.
        # Its callers: the frames above it in the stacks that carry at least
        # 1% of its instructions (the syscall path from the workload's echo;
        # a rare stack that lost its root adds nothing here).
        ancestors, main_callers, under = set(), set(), {}
        for line in open(os.path.join(out, "new.folded")):
            stack, count = line.rsplit(" ", 1)
            frames = stack.split(";")
            if "ktregress_work [ktregress]" in frames:
                above = tuple(frames[:frames.index("ktregress_work [ktregress]") + 1])
                ancestors.update(above)
                under[above] = under.get(above, 0) + int(count)
        total = sum(under.values())
        # A stack whose base the decoder could not know starts with one
        # marker frame ("[base_unknown]"); it is not a function and has no
        # spread of its own to flag, so it is counted and shown, not required.
        unknown_base = sum(c for above, c in under.items() if above[0].startswith("["))
        for above, count in under.items():
            if count >= total / 100:
                main_callers.update(f for f in above if not f.startswith("["))
        print(f"      ktregress_work's instructions under an unknown stack base (new, runs summed): "
              f"{unknown_base} of {total}")
        inclusive = [x["name"] for x in j["inclusive"]]
        missed = sorted(main_callers - set(inclusive))
        check(main_callers and not missed,
              f"inclusive: ktregress_work and all {len(main_callers) - 1} callers on its stacks flagged "
              f"(not flagged: {missed})")
        # Other inclusive changes are real but secondary: the new side's loop
        # runs 10x longer, so the run lasts a little longer and more ticks
        # and interrupts land in it (workload.sh keeps that small). Shown, not
        # held against the diff; the verdict (own instructions) must name
        # ktregress_work alone.
        timer = [sum(int(line.rsplit(" ", 1)[1]) for line in open(os.path.join(out, f"{side}.folded"))
                     if "asm_sysvec_apic_timer_interrupt" in line.rsplit(" ", 1)[0].split(";"))
                 for side in ("base", "new")]
        print(f"      the longer run: timer interrupts (inclusive, runs summed) "
              f"{timer[0]} -> {timer[1]} ({100 * (timer[1] / max(timer[0], 1) - 1):+.1f}%)")
        others = [n for n in inclusive if n not in ancestors]
        print(f"      inclusive: {len(inclusive)} flagged; not callers of ktregress_work (time-driven): {others[:8]}")
    elif mode == "same":
        check(status == 0, f"exit status 0 (no regression): {status}")
        check(not j["self"], f"nothing flagged: {[(x['name'], x['kind']) for x in j['self']][:5]}")
    elif mode == "kernels":
        check(status in (0, 1), f"exit status 0 or 1: {status}")
        check(not j["run_problems"], f"no run over the limits: {j['run_problems']}")
        for side in ("base", "new"):
            kinds = j[side]["decode_error_kinds"]
            check(kinds.get("no_text", 0) == 0 and kinds.get("desync", 0) == 0,
                  f"{side}: no 'no text' or desync decode errors ({kinds})")
        print(f"      {len(j['self'])} functions changed between the kernels:")
        for x in j["self"][:25]:
            print(f"      {x['kind']:8} {x['base']['mean']:12.0f} -> {x['new']['mean']:12.0f}  {x['name']}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
