#!/bin/bash
# kthost agent with N = 1, 2, 3 domains traced at once: the agent's host CPU
# per domain, and each domain's hold latency, side by side, in one run.
#
# Three TCG domains (1 vCPU, 320 MiB, software PT) are booted once under
# libvirtd. Then, RUNS times (default 3), for each LOAD (default busy), each
# TRACER and N = 1, 2, 3 in turn: the first N domains run, the others are
# paused (virsh suspend: no CPU taken), and they are traced either by one
# agent (--match them) or, the baseline, by a kthost trace per domain (the
# way before the agent: separate processes, nothing shared), or by one agent
# that does not raise a holder's vCPU thread (agent-unboosted: --holder-boost
# 0; holder_boost.h). Once each is
# ready, every one of the N guests runs the same workload at the same time:
# BPF programs of four kinds loaded and closed (BPF of them) and MODS module
# load/unload cycles (delete_module waits for its hold), either back to back
# (busy) or in steps of 5 programs and a cycle with PACE_MS between (paced).
# Measured over the workload:
#   host        the whole machine's busy share (/proc/stat): 2 cores here,
#               so 3 TCG vCPUs that each want a core oversubscribe it; and
#               its steal share (a machine that is itself a VM loses its
#               CPUs to its hypervisor meanwhile: no thread of it runs);
#   CPU         utime + stime of the tracer process(es) (/proc/PID/stat)
#               over the workload's wall time, divided by N: % of one core
#               per domain;
#   hold        per domain, from the guest's side (ktguard's hold_hist: the
#               time each freeing path waited, median and p99) and kthost's
#               own part of each hold (host_us in the bundle's holds.jsonl);
#   BPF S       the guest's time for its BPF stress: its own slowdown, the
#               yardstick for what oversubscription alone does to a guest;
#   VCPU WAIT   the share of the workload's wall time each guest's vCPU
#               thread was runnable but waiting for a host CPU (schedstat's
#               run_delay): the guest's clock runs on meanwhile, so a hold
#               that waits on the guest (the holder, ktguest) grows with it;
#   HOLD THR    the mean wait for a host CPU of the tracers' hold-answering
#               threads (kt-guard-mirror, kt-sideband) per time they ran.
# Printed: a row per N and domain (median over runs), then per N min /
# median / max over runs; the goal's ratio per run: the worst domain's hold
# p99 with N = 3 over the single domain's, same run (goal <= 2x), for the
# guest's view and kthost's part; and one agent over a trace per domain at
# N = 3 (does the agent add anything to what separate processes see?).
# A JSON line per run and domain goes to WORK/results.jsonl.
#
# usage: tests/bench/run-agent-bench.sh BUILD_DIR [WORK_DIR]
#   RUNS=N, LOADS="busy paced", TRACERS_COMPARED="agent procs agent-unboosted",
#   BPF=N, MODS=N,
#   PACE_MS=N, GUARD_NICE=N (the tracers' --guard-nice), GUARD_RT=P (their
#   --guard-rt: the hold threads' SCHED_FIFO priority, 0 for normal
#   scheduling; default: kthost's own, 2),
#   HOLD_DETAIL=1 (ktguard logs each hold; tests/bench/hold_breakdown.py then
#   joins them with holds.jsonl by id and prints, per domain, where the
#   slowest holds' time went: before kthost found the notice, kthost's own
#   part, or after the ack word was stored),
#   WORD_SLEEPS="0 500" (ktguard's word_sleep_us values to compare, each a
#   load variant named LOAD-wsN; default: the module's own)
set -euo pipefail
BUILD=$(cd "${1:?usage: run-agent-bench.sh BUILD_DIR [WORK_DIR]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=${2:-$BUILD/agent-bench}
RUNS=${RUNS:-3}
BPF=${BPF:-60}
MODS=${MODS:-10}
LOADS=${LOADS:-busy}
TRACERS_COMPARED=${TRACERS_COMPARED:-agent procs}
PACE_MS=${PACE_MS:-100}
# GUARD_NICE=N: the tracers' --guard-nice (default: unset, the process's own priority).
NICE_ARG="${GUARD_NICE:+--guard-nice=$GUARD_NICE} ${GUARD_RT:+--guard-rt=$GUARD_RT}"
WORD_SLEEPS=${WORD_SLEEPS:-}
HOLD_DETAIL=${HOLD_DETAIL:-0}
K=$BUILD/host/cli/kthost
LV=$SRC/vm-images/libvirt/kthost-libvirt.sh
DOMS="kthost-ab1 kthost-ab2 kthost-ab3"
rm -rf "$W"
mkdir -p "$W"
RESULTS=$W/results.jsonl
: >"$RESULTS"
TRACERS=""
say() { echo "agent bench: $*"; }
cleanup() {
  local p
  for p in $TRACERS; do kill -INT "$p" 2>/dev/null || true; done
  for d in $DOMS; do "$LV" undefine "$d" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
trap 'say "stopped by a signal"; exit 130' INT TERM HUP
g() { local d=$1; shift; "$K" exec --domain "$d" --timeout 900 -- "$@"; }
SOCK=$W/agent.sock
status_json() { "$K" agent --status --json --socket "$SOCK"; }
# ready_count DOMAIN...: how many of them have a ready tracer.
ready_count() {
  { status_json 2>/dev/null || echo '{"domains": []}'; } | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(sum(1 for d in s["domains"] if d["name"] in sys.argv[1:] and d["state"] == "tracing" and d["ready"]))' "$@" || echo 0
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
P=/sys/module/ktguard/parameters
# workload LOAD: what each guest runs. busy: back to back (each vCPU thread
# wants a whole core: 3 of them oversubscribe this 2-core machine). paced: the
# same programs and cycles in steps of 5 programs and 1 cycle with PACE_MS
# between (the guests leave cores idle: what the agent itself adds shows).
workload() {
  local load=${1%%-ws*} ws=""
  [ "$load" = "$1" ] || ws="echo ${1#*-ws} >$P/word_sleep_us && "
  local pre="${ws}echo reset >$P/hold_hist && cat $P/stats >/tmp/stats-before && rm -f /tmp/bpf.json"
  local post="sleep 1 && cat $P/stats >/tmp/stats-after && cat $P/hold_hist >/tmp/hist"
  # HOLD_DETAIL: each hold in the kernel log, kept off the serial console
  # (a console line costs ms under TCG).
  if [ "$HOLD_DETAIL" = 1 ]; then
    pre="dmesg -n 1 && dmesg -c >/dev/null && echo 1 >$P/verbose && $pre"
    post="$post && echo 0 >$P/verbose && dmesg >/tmp/holds.dmesg"
  else
    pre="echo >/tmp/holds.dmesg && $pre"
  fi
  if [ "$load" = busy ]; then
    echo "$pre && ktprobe module-cycle --count $MODS --module /lib/kthost-test/dummy.ko --name dummy >/dev/null &&
      ktprobe bpf-stress --count $BPF --kinds socket,xdp,tracepoint,kprobe --out /tmp/b.txt >>/tmp/bpf.json && $post"
  else
    echo "$pre && i=0 && while [ \$i -lt $BPF ]; do
        ktprobe bpf-stress --count 5 --kinds socket,xdp,tracepoint,kprobe --out /tmp/b.txt >>/tmp/bpf.json || exit 1
        [ \$((i / 5)) -ge $MODS ] || ktprobe module-cycle --count 1 --module /lib/kthost-test/dummy.ko --name dummy >/dev/null || exit 1
        sleep $(awk "BEGIN { print $PACE_MS / 1000 }"); i=\$((i + 5)); done && $post"
  fi
}

say "booting $DOMS (TCG, 1 vCPU, 320 MiB, software PT); $RUNS runs; per domain $MODS module cycles and $BPF BPF programs"
"$LV" start-daemon >/dev/null
pids=""
for d in $DOMS; do
  "$LV" undefine "$d" >/dev/null 2>&1 || true
  "$LV" define "$BUILD/vm-image" --name "$d" --accel tcg --vcpus 1 --mem 320 >/dev/null
  "$LV" start "$d" --timeout 300 >"$W/start-$d.log" 2>&1 & pids="$pids $!"
done
for p in $pids; do wait "$p" || { cat "$W"/start-*.log; say "a domain did not boot"; exit 1; }; done

# start_tracers TRACER TAG DOMAIN...: one agent for them all, or (procs) one
# kthost trace per domain, the way before the agent; then until each is ready.
start_tracers() {
  local tracer=$1 tag=$2 d deadline=$((SECONDS + 240))
  shift 2
  TRACERS=""
  if [ "$tracer" = agent ] || [ "$tracer" = agent-unboosted ]; then
    local doms="$*" boost=""
    [ "$tracer" = agent ] || boost=--holder-boost=0
    # shellcheck disable=SC2086
    "$K" agent --output "$W/out-$tag" --socket "$SOCK" --match "${doms// /,}" $NICE_ARG $boost >"$W/agent-$tag.log" 2>&1 &
    TRACERS=$!
    until [ "$(ready_count "$@")" = "$#" ]; do
      [ $SECONDS -lt $deadline ] || { say "$tag: not every domain became ready"; tail -n 30 "$W/agent-$tag.log"; exit 1; }
      sleep 1
    done
    # As long as the baseline's settling below: a session's first seconds
    # (PT switched on, the guests' code translated anew, the initial
    # snapshot written) must not fall into one tracer's workload only.
    sleep 3
    return
  fi
  for d in "$@"; do
    mkdir -p "$W/out-$tag/$d/boot"
    # shellcheck disable=SC2086
    "$K" trace --domain "$d" -o "$W/out-$tag/$d/boot/000" $NICE_ARG >"$W/trace-$tag-$d.log" 2>&1 &
    TRACERS="$TRACERS $!"
  done
  local p
  for p in $TRACERS; do  # "kthost trace: DESCRIPTION" once the session is open; then a helper's handshake
    d=$1
    shift
    until grep -q "^kthost trace: " "$W/trace-$tag-$d.log"; do
      if [ $SECONDS -ge $deadline ] || ! kill -0 "$p" 2>/dev/null; then
        say "$tag: kthost trace on $d did not open"; cat "$W/trace-$tag-$d.log"; exit 1
      fi
      sleep 0.5
    done
  done
  sleep 3
}
stop_tracers() {
  local p rc=0
  for p in $TRACERS; do kill -INT "$p"; done
  for p in $TRACERS; do wait "$p" || rc=1; done
  TRACERS=""
  [ $rc = 0 ] || { say "$1: a tracer exited with an error"; tail -n 20 "$W"/agent-"$1".log "$W"/trace-"$1"-*.log 2>/dev/null; exit 1; }
}
tracer_ticks() { local p t=0; for p in $TRACERS; do t=$((t + $(cpu_ticks "$p"))); done; echo $t; }
# Busy and total jiffies of the whole host (/proc/stat's cpu line).
host_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9 }' /proc/stat; }

# sched_snapshot FILE DOMAIN...: schedstat of each domain's vCPU threads and
# of the tracers' hold-answering threads, as JSON {"vcpu": {domain: [run_delay_ns,
# timeslices]}, "hold": {tid: [run_delay_ns, timeslices]}}.
sched_snapshot() {
  local file=$1 d
  shift
  python3 - "$file" "$TRACERS" "$@" <<'PY'
import glob, json, os, sys
file, tracers, doms = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
def sched(task):
    try:
        delay, slices = open(task + "/schedstat").read().split()[1:3]
        return [int(delay), int(slices)]
    except (OSError, ValueError):
        return None
out = {"vcpu": {}, "hold": {}}
for d in doms:
    pid = open("/run/libvirt/qemu/%s.pid" % d).read().strip()
    for t in glob.glob("/proc/%s/task/*" % pid):
        try:
            comm = open(t + "/comm").read().strip()
        except OSError:
            continue
        if comm.startswith("CPU ") and (s := sched(t)):
            out["vcpu"][d] = [a + b for a, b in zip(out["vcpu"].get(d, [0, 0]), s)]
for p in tracers:
    for t in glob.glob("/proc/%s/task/*" % p):
        try:
            comm = open(t + "/comm").read().strip()
        except OSError:
            continue
        if comm in ("kt-guard-mirror", "kt-sideband") and (s := sched(t)):
            out["hold"][os.path.basename(t)] = s
json.dump(out, open(file, "w"))
PY
}

# one RUN LOAD TRACER N: the first N domains traced, the workload in each.
one() {
  local run=$1 load=$2 tracer=$3 n=$4 i d doms="" tag=$1-$2-$3-$4 t0 t1 c0 c1 h0 h1 hz
  for i in 1 2 3; do
    d=kthost-ab$i
    if [ "$i" -le "$n" ]; then
      doms="$doms $d"
      [ "$(virsh -q -c qemu:///system domstate "$d")" = paused ] && virsh -q -c qemu:///system resume "$d" >/dev/null
    else
      [ "$(virsh -q -c qemu:///system domstate "$d")" = running ] && virsh -q -c qemu:///system suspend "$d" >/dev/null
    fi
  done
  doms=${doms# }
  # shellcheck disable=SC2086
  start_tracers "$tracer" "$tag" $doms
  hz=$(getconf CLK_TCK)
  # shellcheck disable=SC2086
  sched_snapshot "$W/sched0-$tag.json" $doms
  c0=$(tracer_ticks) h0=$(host_jiffies) t0=$(date +%s.%N)
  local pids="" script
  script=$(workload "$load")
  for d in $doms; do g "$d" "$script" >"$W/wl-$tag-$d.log" 2>&1 & pids="$pids $!"; done
  for p in $pids; do wait "$p" || { say "$tag: a workload failed"; cat "$W"/wl-"$tag"-*.log; exit 1; }; done
  c1=$(tracer_ticks) h1=$(host_jiffies) t1=$(date +%s.%N)
  # shellcheck disable=SC2086
  sched_snapshot "$W/sched1-$tag.json" $doms
  stop_tracers "$tag"
  for d in $doms; do
    mkdir -p "$W/guest-$tag-$d"
    for f in stats-before stats-after hist bpf.json holds.dmesg; do g "$d" cat "/tmp/$f" >"$W/guest-$tag-$d/$f"; done
    if [ "$HOLD_DETAIL" = 1 ]; then
      echo "  $tag $d:"
      python3 "$SRC/tests/bench/hold_breakdown.py" "$W/guest-$tag-$d/holds.dmesg" "$W/out-$tag/$d"/*/*/holds.jsonl \
        --json "$W/guest-$tag-$d/breakdown.json" | sed 's/^/  /' || true
    fi
  done
  # shellcheck disable=SC2086
  python3 - "$RESULTS" "$run" "$n" "$W/out-$tag" "$W/guest-$tag" "$hz" "$c0" "$c1" "$t0" "$t1" "$load" "$tracer" \
    "$h0 $h1" "$W/sched0-$tag.json" "$W/sched1-$tag.json" $doms <<'PY'
import glob, json, sys
results, run, n, out, guest, hz, c0, c1, t0, t1, load, tracer, host, sched0, sched1 = sys.argv[1:16]
doms = sys.argv[16:]
sched0, sched1 = json.load(open(sched0)), json.load(open(sched1))
n, hz = int(n), float(hz)
wall = float(t1) - float(t0)
cpu_per_domain = (int(c1) - int(c0)) / hz / wall / n * 100
b0, a0, s0, b1, a1, s1 = map(int, host.split())
host_busy = 100.0 * (b1 - b0) / max(1, a1 - a0)
host_steal = 100.0 * (s1 - s0) / max(1, a1 - a0)

def pct(values, p):
    values = sorted(values)
    return values[max(0, min(len(values) - 1, -(-len(values) * p // 100) - 1))] if values else None

def hist_pct(path, p):
    # ktguard's hold_hist: "<bucket low in us> <count>" lines
    rows = [tuple(map(int, l.split())) for l in open(path) if len(l.split()) == 2]
    total = sum(c for _, c in rows)
    want, acc = -(-total * p // 100), 0
    for low, c in rows:
        acc += c
        if acc >= want:
            return low
    return None

def stats(path):
    return {k: int(v) for k, v in (w.split("=", 1) for w in open(path).read().split() if "=" in w)
            if v.lstrip("-").isdigit()}

# The hold-answering threads that ran through the workload: mean wait per run.
hold_delay = [(sched1["hold"][t][0] - v[0], sched1["hold"][t][1] - v[1]) for t, v in sched0["hold"].items() if t in sched1["hold"]]
hold_wait_us = sum(d for d, _ in hold_delay) / 1000 / max(1, sum(s for _, s in hold_delay)) if hold_delay else None

with open(results, "a") as f:
    for d in doms:
        v0, v1 = sched0["vcpu"].get(d), sched1["vcpu"].get(d)
        vcpu_wait = 100.0 * (v1[0] - v0[0]) / 1e9 / wall if v0 and v1 else None
        g = "%s-%s" % (guest, d)
        host_us, boosts, boost_timeouts = [], 0, 0
        for h in glob.glob("%s/%s/*/*/holds.jsonl" % (out, d)):
            host_us += [json.loads(l)["host_us"] for l in open(h) if l.strip()]
        for sj in glob.glob("%s/%s/*/*/summary.json" % (out, d)):
            b = json.load(open(sj)).get("holder_boost", {})
            boosts, boost_timeouts = boosts + b.get("boosts", 0), boost_timeouts + b.get("timeouts", 0)
        before, after = stats(g + "/stats-before"), stats(g + "/stats-after")
        missed = sum(after.get(k, 0) - before.get(k, 0) for k in ("timeouts", "reader_gone", "overflows"))
        row = {"run": int(run), "load": load, "tracer": tracer, "n": n, "host_busy_pct": round(host_busy, 1),
               "host_steal_pct": round(host_steal, 1), "domain": d, "agent_cpu_pct_per_domain": round(cpu_per_domain, 2),
               "wall_s": round(wall, 2), "holds": len(host_us), "missed_holds": missed,
               "hold_median_us": hist_pct(g + "/hist", 50), "hold_p99_us": hist_pct(g + "/hist", 99),
               "host_median_us": pct(host_us, 50), "host_p99_us": pct(host_us, 99),
               "bpf_seconds": round(sum(json.loads(l).get("seconds", 0) for l in open(g + "/bpf.json") if l.strip()), 2),
               "vcpu_wait_pct": round(vcpu_wait, 1) if vcpu_wait is not None else None,
               "hold_thread_wait_us": round(hold_wait_us, 1) if hold_wait_us is not None else None,
               "word_sleeps": after.get("word_sleeps", 0) - before.get("word_sleeps", 0),
               "late_wakes": after.get("late_wakes", 0) - before.get("late_wakes", 0),
               "holder_boosts": boosts, "holder_boost_timeouts": boost_timeouts}
        f.write(json.dumps(row) + "\n")
        print("  run %s %s %s N=%d %s: host %.0f%% busy (%.1f%% stolen), tracer CPU %.1f%% of a core per domain, %d holds (%d missed), hold median %s us p99 %s us, "
              "kthost part %.0f / %.0f us, BPF stress %.1f s, vCPU waited %s%% of the time, hold threads %s us per run, "
              "%d word polls gave up, holder raised %d times (%d past its limit)" %
              (run, load, tracer, n, d, host_busy, host_steal, cpu_per_domain, row["holds"], missed, row["hold_median_us"], row["hold_p99_us"],
               row["host_median_us"] or 0, row["host_p99_us"] or 0, row["bpf_seconds"] or 0, row["vcpu_wait_pct"],
               row["hold_thread_wait_us"], row["late_wakes"], boosts, boost_timeouts))
PY
  rm -rf "$W/out-$tag"  # PT makes bundles large
}

LOAD_VARIANTS=""
for load in $LOADS; do
  if [ -z "$WORD_SLEEPS" ]; then LOAD_VARIANTS="$LOAD_VARIANTS $load"; fi
  for ws in $WORD_SLEEPS; do LOAD_VARIANTS="$LOAD_VARIANTS $load-ws$ws"; done
done
for run in $(seq 1 "$RUNS"); do
  for load in $LOAD_VARIANTS; do
    for tracer in $TRACERS_COMPARED; do
      for n in 1 2 3; do one "$run" "$load" "$tracer" "$n"; done
    done
  done
done

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
all_rows = [json.loads(l) for l in open(sys.argv[1])]
runs = sorted({r["run"] for r in all_rows})
def mmm(v, fmt="%.0f"):
    v = sorted(x for x in v if x is not None)
    return " / ".join(fmt % x for x in (v[0], statistics.median(v), v[-1])) if v else "-"
def worst(rows, n, k, run):
    return max(r[k] for r in rows if r["n"] == n and r["run"] == run)
for load in dict.fromkeys(r["load"] for r in all_rows):
  for tracer in dict.fromkeys(r["tracer"] for r in all_rows):
    rows = [r for r in all_rows if r["load"] == load and r["tracer"] == tracer]
    what = {"agent": "one agent", "agent-unboosted": "one agent, holders not raised (--holder-boost 0)"}.get(
        tracer, "a kthost trace per domain")
    print()
    print("%s load, %s: per N and domain, median over %d runs" % (load, what, len(runs)))
    print("  %-2s %-11s %6s %12s %6s %10s %10s %11s %11s %7s %10s %10s" % ("N", "DOMAIN", "HOST", "CPU%/DOMAIN", "HOLDS",
          "HOLD MED", "HOLD P99", "KTHOST MED", "KTHOST P99", "BPF S", "VCPU WAIT", "HOLD THR"))
    for n in (1, 2, 3):
        for d in sorted({r["domain"] for r in rows if r["n"] == n}):
            s = [r for r in rows if r["n"] == n and r["domain"] == d]
            med = lambda k: statistics.median(r.get(k) or 0 for r in s)
            print("  %-2d %-11s %5.0f%% %12.1f %6.0f %8.0fus %8.0fus %9.0fus %9.0fus %7.1f %9.1f%% %8.0fus" % (
                n, d, med("host_busy_pct"), med("agent_cpu_pct_per_domain"), med("holds"), med("hold_median_us"),
                med("hold_p99_us"), med("host_median_us"), med("host_p99_us"), med("bpf_seconds"), med("vcpu_wait_pct"),
                med("hold_thread_wait_us")))
    print("  min / median / max over runs (holds: the worst domain of each run)")
    for n in (1, 2, 3):
        cpu = [next(r["agent_cpu_pct_per_domain"] for r in rows if r["n"] == n and r["run"] == x) for x in runs]
        w = lambda k: [worst(rows, n, k, x) for x in runs]
        wait = [max(r.get("vcpu_wait_pct") or 0 for r in rows if r["n"] == n and r["run"] == x) for x in runs]
        steal = [max(r.get("host_steal_pct") or 0 for r in rows if r["n"] == n and r["run"] == x) for x in runs]
        print("  N=%d  CPU per domain %s %%   hold p99 %s us   kthost p99 %s us   missed %s   vCPU waited %s %%   stolen %s %%" % (
            n, mmm(cpu, "%.1f"), mmm(w("hold_p99_us")), mmm(w("host_p99_us")), mmm(w("missed_holds")), mmm(wait, "%.1f"),
            mmm(steal, "%.1f")))
    for k, label in (("hold_p99_us", "guest's hold p99"), ("host_p99_us", "kthost's part p99"),
                     ("bpf_seconds", "guest's BPF stress")):
        v = [worst(rows, 3, k, x) / worst(rows, 1, k, x) for x in runs]
        goal = "" if k == "bpf_seconds" else "   goal <= 2x: " + ("met" if statistics.median(v) <= 2 else "NOT met")
        print("  %-19s N=3 / N=1: %sx%s" % (label, mmm(v, "%.2f"), goal))
  tracers = {r["tracer"] for r in all_rows if r["load"] == load}
  for other, what in (("procs", "a kthost trace per domain"), ("agent-unboosted", "holders not raised")):
    if not {"agent", other} <= tracers:
      continue
    a = [r for r in all_rows if r["load"] == load and r["tracer"] == "agent"]
    p = [r for r in all_rows if r["load"] == load and r["tracer"] == other]
    print()
    print("%s load, N=3: one agent over %s, same run (min / median / max)" % (load, what))
    for k, label in (("hold_p99_us", "guest's hold p99"), ("host_p99_us", "kthost's part p99"),
                     ("agent_cpu_pct_per_domain", "CPU per domain")):
        print("  %-19s %sx" % (label, mmm([worst(a, 3, k, x) / worst(p, 3, k, x) for x in runs], "%.2f")))
PY
