#!/usr/bin/env python3
"""The interactive flame graph in a real browser (Debian's headless Chromium).

  check-flame-browser.py KTHOST WORKDIR

Writes a folded-stacks file, draws it with `kthost flamegraph`, and loads the
SVG in chromium-headless-shell, driven over the DevTools protocol on a pipe
(--remote-debugging-pipe) as a person would use it: the pointer moves onto a
frame (its details line shows it), presses and releases on it (zoom), then
clicks the Search button and types the term into the prompt the page opens.
The DOM the browser then holds is checked against the folded file, computed
here without kthost: the zoomed frame spans the width, its descendants scale
by its count, other frames are hidden, its ancestors are faded; the matched
frames are exactly those whose names match, and the matched share is the
share of stacks with a matching frame. A click on "Reset Zoom" then shows
every frame again.
"""
import fcntl
import json
import os
import re
import select
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


class Browser:
    """chromium-headless-shell over the DevTools protocol on fds 3 (commands)
    and 4 (replies and events), each message JSON ended by a NUL."""

    def __init__(self, exe, profile):
        self.exe, self.profile, self.next_id, self.events, self.session = exe, profile, 0, [], None
        self.on_event = None

    def __enter__(self):
        # Above 4, so that the shell's redirections to 3 and 4 cannot close them.
        high = lambda fd: (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10), os.close(fd))[0]
        to_browser, self.commands = os.pipe()
        self.replies, from_browser = os.pipe()
        to_browser, from_browser = high(to_browser), high(from_browser)
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser} {to_browser}<&- {from_browser}>&-',
             self.exe, "--no-sandbox", "--disable-gpu", "--headless", "--remote-debugging-pipe",
             f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.buffer = b""
        return self

    def __exit__(self, *exc):
        try:
            self.call("Browser.close", session=False, wait=False)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.commands)
        os.close(self.replies)

    def message(self, timeout=60):
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.replies], [], [], timeout)
            if not ready:
                raise SystemExit("FAIL  the browser sent nothing for %d s" % timeout)
            chunk = os.read(self.replies, 1 << 20)
            if not chunk:
                raise SystemExit("FAIL  the browser closed its DevTools pipe")
            self.buffer += chunk
        text, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(text)

    def call(self, method, params=None, session=True, wait=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.commands, json.dumps(msg).encode() + b"\0")
        if not wait:
            return None
        while True:
            m = self.message()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise SystemExit(f"FAIL  {method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)
                if self.on_event:
                    self.on_event(m)

    def wait_event(self, method):
        while True:
            for i, m in enumerate(self.events):
                if m["method"] == method:
                    return self.events.pop(i)
            m = self.message()
            if "method" in m:
                self.events.append(m)
                if self.on_event:
                    self.on_event(m)

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise SystemExit(f"FAIL  in the page: {expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def box(self, element_expr):
        """The centre of an element, in the viewport's CSS pixels."""
        x, y, w, h = self.evaluate(f"(function () {{ var r = ({element_expr}).getBoundingClientRect();"
                                   " return [r.x, r.y, r.width, r.height]; })()")
        return x + w / 2, y + h / 2

    def click(self, x, y):
        """A real pointer click: moved there, pressed and released."""
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent",
                      {"type": kind, "x": x, "y": y, "button": "left", "buttons": 1 if kind == "mousePressed" else 0,
                       "clickCount": 1})

    def drive(self, svg_path, zoom_id, zoom_name, zoom_frame):
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable")
        root = ET.parse(svg_path).getroot()
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": int(float(root.get("width"))) + 20, "height": int(float(root.get("height"))) + 20,
                   "deviceScaleFactor": 1, "mobile": False})
        self.call("Page.navigate", {"url": "file://" + svg_path})
        self.wait_event("Page.loadEventFired")
        # Hover: the details line names the frame under the pointer.
        x, y = self.box(f"document.getElementById('{zoom_id}').getElementsByTagName('rect')[0]")
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        details = self.evaluate("document.getElementById('details').textContent")
        title = zoom_frame.find(SVG + "title").text
        check(details == title, f"hovering {zoom_name} shows its details: '{details}'")
        # Click: zoom.
        self.click(x, y)
        # Search: the button opens a prompt; the term is typed into it.
        prompts = []

        def answer(m):
            if m["method"] == "Page.javascriptDialogOpening":
                prompts.append(m["params"].get("type"))
                self.call("Page.handleJavaScriptDialog", {"accept": True, "promptText": SEARCH}, wait=False)
        self.on_event = answer
        self.click(*self.box("document.getElementById('search')"))
        self.evaluate("1")  # the dialog's answer is in before the DOM is read
        self.on_event = None
        check(prompts == ["prompt"], f"the Search button opened one prompt: {prompts}")
        dom = self.evaluate("new XMLSerializer().serializeToString(document)")
        # Reset Zoom: every frame shows again.
        self.click(*self.box("document.getElementById('unzoom')"))
        hidden = self.evaluate("document.querySelectorAll('g.f.hide').length")
        zoomed = self.evaluate("document.documentElement.getAttribute('fg-zoomed')")
        check(hidden == 0 and not zoomed, f"Reset Zoom shows every frame again ({hidden} hidden, zoomed {zoomed!r})")
        return dom


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
    with Browser(browser(), os.path.join(work, "profile")) as b:
        dom = b.drive(os.path.abspath(svg), zoom_id, name_of(frames[zoom_id]), frames[zoom_id])
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
