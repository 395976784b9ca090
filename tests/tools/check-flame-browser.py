#!/usr/bin/env python3
"""The interactive flame graph in a real browser (Debian's headless Chromium).

  check-flame-browser.py KTHOST WORKDIR

Writes a folded-stacks file, draws it with `kthost flamegraph`, and loads the
SVG in chromium-headless-shell with "?z=ID&s=REGEX": the SVG's own script
clicks frame ID (a MouseEvent through its click listener) and searches. The
DOM the browser dumps is checked against the folded file, computed here
without kthost: the zoomed frame spans the width, its descendants scale by
its count, other frames are hidden, its ancestors are faded; the matched
frames are exactly those whose names match, and the matched share is the
share of stacks with a matching frame.
"""
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


STACKS = {
    "start_kernel;do_idle;default_idle": 5000,
    "start_kernel;do_idle;cpuidle_enter;ktregress_work [ktregress]": 700,
    "entry_SYSCALL_64;do_syscall_64;__x64_sys_read;vfs_read;seq_read_iter": 2400,
    "entry_SYSCALL_64;do_syscall_64;__x64_sys_read;vfs_read;ext4_file_read_iter": 1600,
    "entry_SYSCALL_64;do_syscall_64;__x64_sys_openat;do_sys_openat2;path_openat": 2000,
    "entry_SYSCALL_64;do_syscall_64": 300,
    "asm_sysvec_apic_timer_interrupt;hrtimer_interrupt;__hrtimer_run_queues": 900,
    "entry_SYSCALL_64;do_syscall_64;__x64_sys_read;vfs_read;seq_read_iter;read_fn_x": 100,
}
ZOOM_NAME, ZOOM_DEPTH = "__x64_sys_read", 3
SEARCH = "read"


def browser():
    for name in ("chromium-headless-shell", "chromium"):
        if shutil.which(name):
            return name
    raise SystemExit("FAIL  no chromium-headless-shell or chromium (scripts/install-deps.sh installs it)")


def main():
    kthost, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folded, svg = os.path.join(work, "stacks.folded"), os.path.join(work, "flame.svg")
    with open(folded, "w") as f:
        for stack, n in STACKS.items():
            f.write(f"{stack} {n}\n")
    subprocess.run([kthost, "flamegraph", folded, "-o", svg, "--title", "browser test"], check=True)
    # The frame to click: its id, from the SVG as written.
    tree = ET.parse(svg).getroot()
    frames = {g.get("id"): g for g in tree.iter(SVG + "g") if (g.get("class") or "").split()[:1] == ["f"]}
    name_of = lambda g: g.find(SVG + "title").text.rsplit(" (", 1)[0]
    zoom_id = next(i for i, g in frames.items() if name_of(g) == ZOOM_NAME and g.get("fg-d") == str(ZOOM_DEPTH))
    url = f"file://{os.path.abspath(svg)}?z={zoom_id}&s={SEARCH}"
    dom = subprocess.run([browser(), "--no-sandbox", "--disable-gpu", "--headless", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120).stdout
    check("<svg" in dom, f"the browser loaded the SVG ({len(dom)} bytes of DOM)")
    root = ET.fromstring(dom)
    after = {g.get("id"): g for g in root.iter(SVG + "g") if (g.get("class") or "").split()[:1] == ["f"]}
    check(len(after) == len(frames), f"every frame still there: {len(after)} of {len(frames)}")
    total = sum(STACKS.values())
    width = float(root.get("width")) - 2 * float(root.get("fg-side"))
    # Zoom: the clicked frame fills the width; the rest follow from the stacks.
    z = after[zoom_id]
    rect = lambda g: g.find(SVG + "rect")
    check(root.get("fg-zoomed") == zoom_id, f"zoomed into {ZOOM_NAME} ({zoom_id})")
    check(abs(float(rect(z).get("x")) - 10) < 0.01 and abs(float(rect(z).get("width")) - width) < 0.01,
          f"{ZOOM_NAME} spans the full width: x {rect(z).get('x')}, width {rect(z).get('width')}")
    # Depth 0 is the root, "all": a stack's frame i sits at depth i + 1.
    zoom_value = sum(n for s, n in STACKS.items() if s.split(";")[ZOOM_DEPTH - 1:ZOOM_DEPTH] == [ZOOM_NAME])
    for g in after.values():
        name, depth = name_of(g), int(g.get("fg-d"))
        classes = (g.get("class") or "").split()
        value = float(g.get("fg-v"))
        # Inside the zoomed frame: its subtree (the stacks through it at its depth).
        inside = depth >= ZOOM_DEPTH and float(g.get("fg-s")) >= float(z.get("fg-s")) and \
            float(g.get("fg-s")) + value <= float(z.get("fg-s")) + float(z.get("fg-v"))
        if depth < ZOOM_DEPTH and "hide" not in classes and "parent" in classes:
            check(abs(float(rect(g).get("width")) - width) < 0.01, f"ancestor {name} spans the width, faded")
        elif inside:
            want = value / zoom_value * width
            check("hide" not in classes and abs(float(rect(g).get("width")) - want) < 0.02,
                  f"{name} in the zoomed frame: width {rect(g).get('width')} = {want:.2f}")
        else:
            check("hide" in classes, f"{name} outside the zoomed frame is hidden")
    # Search: matches coloured, share from the stacks.
    want_matched = sum(n for s, n in STACKS.items() if any(re.search(SEARCH, f) for f in s.split(";")))
    share = 100.0 * want_matched / total
    got = root.get("fg-matched")
    check(got is not None and abs(float(got) - share) < 0.001, f"matched share {got}% = {share:.4f}% from the stacks")
    text = next((t.text for t in root.iter(SVG + "text") if t.get("id") == "matched"), "")
    check(text == f"Matched: {share:.2f}%", f"the matched share is shown: '{text}'")
    for g in after.values():
        is_match = re.search(SEARCH, name_of(g)) is not None
        coloured = rect(g).get("fill") == "rgb(230,0,230)"
        check(is_match == coloured and (g.get("fg-match") == "1") == is_match,
              f"{name_of(g)}: {'highlighted' if is_match else 'not highlighted'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
