#!/usr/bin/env python3
"""Where each hold's time went: the guest's side joined with kthost's, by id.

usage: hold_breakdown.py DMESG HOLDS_JSONL... [--json OUT]

DMESG is the guest's kernel log with ktguard's verbose lines ("ktguard: notice
ID [...) kind K sleep: outcome O after US us"), whose timestamps, like a
notice's time (guest_time in holds.jsonl), are the guest's local_clock. HOLDS
are the bundle's holds.jsonl files: per hold, when kthost took the notice up
(seen_ns, the host's CLOCK_MONOTONIC) and its own part (host_us).

Under TCG the guest's clock is the host's TSC with an offset, so seen - queued
is the notice's travel time plus a constant. The constant is not known; the
smallest difference among a hold's neighbours (the 50 before and after) stands
for it, which also absorbs a slow drift of the guest's TSC calibration. So per
hold, relative to the quickest neighbour:
  found     queued in the guest -> kthost took it up (the mirror's poll,
            the channel, the host thread's wait for a CPU)
  host      kthost's own part (host_us: copy and ack word)
  guest     the rest of the hold: ack word stored -> the holder saw it and
            went on (its poll, its sleep steps, its wait for the vCPU)
Prints the totals' median and p99 and, for the slowest 2% of holds, the share
of each part: which side makes the tail.
"""
import json
import re
import statistics
import sys

LINE = re.compile(r"^\[\s*(\d+)\.(\d+)\] ktguard: notice (\d+) \[[^)]*\) kind (\d+) (\w+): outcome (-?\d+) after (\d+) us"
                  r"( \(word poll gave up\))?(?:, (\d+) yields)?")
NEIGHBOURS = 50


def guest_holds(path):
    """{id: (end_ns, hold_us, method)} from ktguard's verbose lines."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                end_ns = int(m.group(1)) * 1_000_000_000 + int(m.group(2).ljust(9, "0")[:9])
                out[int(m.group(3))] = (end_ns, int(m.group(7)), m.group(5) + (", poll gave up" if m.group(8) else "") +
                                       (", yielded %s times" % m.group(9) if m.group(9) and m.group(9) != "0" else ""))
    return out


def host_holds(paths):
    """{id: record} from holds.jsonl lines that carry seen_ns."""
    out = {}
    for p in paths:
        with open(p) as f:
            for line in f:
                if not line.strip():
                    continue
                h = json.loads(line)
                if h.get("seen_ns") and h.get("guest_time"):
                    out[int(h["id"])] = h
    return out


def pct(values, p):
    v = sorted(values)
    return v[max(0, min(len(v) - 1, -(-len(v) * p // 100) - 1))] if v else 0


def breakdown(guest, host):
    ids = sorted(set(guest) & set(host))
    raw = [host[i]["seen_ns"] - host[i]["guest_time"] for i in ids]
    rows = []
    for k, i in enumerate(ids):
        base = min(raw[max(0, k - NEIGHBOURS):k + NEIGHBOURS + 1])
        found_us = (raw[k] - base) / 1000
        host_us = float(host[i]["host_us"])
        _, hold_us, method = guest[i]
        rows.append({"id": i, "hold_us": hold_us, "found_us": round(found_us, 1), "host_us": round(host_us, 1),
                     "guest_us": round(max(0.0, hold_us - found_us - host_us), 1), "method": method,
                     "polled": bool(host[i].get("polled")), "poll_sleep_us": host[i].get("poll_sleep_us", 0),
                     "poll_lock_us": host[i].get("poll_lock_us", 0)})
    return rows


def main(argv):
    out_json = None
    if "--json" in argv:
        k = argv.index("--json")
        out_json = argv[k + 1]
        argv = argv[:k] + argv[k + 2:]
    if len(argv) < 2:
        sys.exit(__doc__)
    guest, host = guest_holds(argv[0]), host_holds(argv[1:])
    rows = breakdown(guest, host)
    if not rows:
        print("hold breakdown: no hold is in both the guest's log (%d) and holds.jsonl (%d)" % (len(guest), len(host)))
        return 1
    print("hold breakdown: %d holds joined (guest log %d, holds.jsonl %d)" % (len(rows), len(guest), len(host)))
    for k in ("hold_us", "found_us", "host_us", "guest_us"):
        v = [r[k] for r in rows]
        print("  %-9s median %8.0f us  p99 %8.0f us  max %8.0f us" % (k, statistics.median(v), pct(v, 99), max(v)))
    slow = sorted(rows, key=lambda r: r["hold_us"])[-max(1, len(rows) // 50):]
    total = sum(r["hold_us"] for r in slow) or 1
    print("  slowest %d holds (%.0f us and over): found %.0f%%, host %.0f%%, guest %.0f%% of their time" % (
        len(slow), slow[0]["hold_us"], 100 * sum(r["found_us"] for r in slow) / total,
        100 * sum(r["host_us"] for r in slow) / total, 100 * sum(r["guest_us"] for r in slow) / total))
    for r in slow:
        print("    id %-6d hold %6d us: found %7.0f  host %5.0f  guest %7.0f  (%s%s)" % (
            r["id"], r["hold_us"], r["found_us"], r["host_us"], r["guest_us"], r["method"],
            ", polled after a %.0f us sleep and %.0f us for the lock" % (r["poll_sleep_us"], r["poll_lock_us"])
            if r["polled"] else ", channel"))
    gave_up = [r for r in rows if "gave up" in r["method"]]
    if gave_up:
        print("  %d word polls gave up (the reader was woken after word_spin_us): found %s us, host %s us" % (
            len(gave_up), " ".join("%.0f" % r["found_us"] for r in gave_up[:20]),
            " ".join("%.0f" % r["host_us"] for r in gave_up[:20])))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
