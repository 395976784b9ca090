#!/bin/bash
# kthost agent end to end, against real libvirtd and three TCG domains at once
# (one vCPU each, the software PT plugin), checked against each guest's own
# view of its BPF JIT images (jited_prog_insns, written by ktprobe):
#   1. the agent follows libvirt and traces the domains that opt in: kthost-ag1
#      by name, kthost-ag2 by the tag in its kthost <metadata> element, and
#      kthost-ag3, whose RAM is anonymous (no shared backing), through QEMU's
#      process memory, chosen by itself; kthost-ag0 has no org.kthost.0
#      channel and is listed as not traced, with why;
#   2. each guest runs its own BPF (a different seed each) and module
#      workload at the same time; every bundle holds exactly its own guest's
#      JIT bytes, and none of another guest's (no cross-talk);
#   3. kthost-ag3 is destroyed mid-trace: its bundle is closed and reads
#      back (kthost report), and the others' holds go on being answered;
#   4. kthost-ag2's QEMU is killed (a crash) and the domain started again: a
#      second boot directory and bundle, with the programs loaded after it;
#   5. libvirtd restarted: the agent reconnects, and each domain traces on in
#      a new bundle of the same boot directory;
#      and kthost-ag1 reset in place (virsh reset: libvirt's reboot event):
#      the old bundle closed, the next in the boot directory BOOT-r1;
#   6. the status (text and JSON) and the Prometheus metrics say the same as
#      the bundles (holds > 0 for each domain, a parser of our own here);
#   7. SIGTERM closes every bundle, and the agent exits 0;
#   8. (the BPF checks of 2-5, and cross-talk, on the closed bundles)
#   9. a second agent with rotation by time and a domain disk budget: a
#      bundle per rotation, then the budget stops the trace, counted;
#  10. a third with a PT-rate budget (stops, cool-down, resumes) and the
#      metrics on a loopback TCP port; 11. a fourth with a memory budget;
#  12. a fifth with kthost-ag1's bundles on a full disk (a small tmpfs): its
#      trace fails (ENOSPC), is reported and retried with back-off, and
#      kthost-ag2's goes on; then kill -9 of that agent mid-workload: both
#      guests run on, their workloads finish, and ktguard's longest hold is
#      within its 200 ms timeout.
# usage: tests/vm/run-agent.sh BUILD_DIR [WORK_DIR]
set -euo pipefail
BUILD=$(cd "${1:?usage: run-agent.sh BUILD_DIR [WORK_DIR]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=${2:-$BUILD/agent-test}
K=$BUILD/host/cli/kthost
LV=$SRC/vm-images/libvirt/kthost-libvirt.sh
CHECK_BPF=$SRC/tests/tools/check-bpf-text.py
DOMS="kthost-ag0 kthost-ag1 kthost-ag2 kthost-ag3"
umount "$W/out5/kthost-ag1" 2>/dev/null || true
rm -rf "$W"
mkdir -p "$W"
OUT=$W/out
SOCK=$W/agent.sock
AGENT=""
say() { echo "agent test: $*"; }
failed=0
# shellcheck source=tests/vm/agent-lib.sh
. "$SRC/tests/vm/agent-lib.sh"
cleanup() {
  [ -z "$AGENT" ] || kill -TERM "$AGENT" 2>/dev/null || true
  umount "$W/out5/kthost-ag1" 2>/dev/null || true
  for d in $DOMS; do
    cp "/run/kthost/$d/console.log" "$W/console-$d.log" 2>/dev/null || true
    "$LV" undefine "$d" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT
trap 'say "stopped by a signal"; exit 130' INT TERM HUP
status_json() { "$K" agent --status --json --socket "$SOCK"; }
# domain_field DOMAIN FIELD: the field of the domain's live (not ended) tracer.
domain_field() { agent_domain_field "$SOCK" "$@"; }
# wait_ready DOMAIN...: until each has a tracer whose guest helper is ready.
wait_ready() { agent_wait_ready "$SOCK" "$W/agent.log" "$@"; }
g() { local d=$1; shift; "$K" exec --domain "$d" --timeout 600 -- "$@"; }
# workload DOMAIN SEED FILE: BPF programs of three kinds (seeded: different
# programs in each guest) and two module cycles; FILE gets the guest's JIT bytes.
workload() {
  g "$1" "ktprobe bpf-stress --count 8 --kinds socket,xdp,fentry --seed $2 --out /tmp/bpf-$2.txt >/dev/null &&
     for i in 1 2; do insmod /lib/kthost-test/dummy.ko && rmmod dummy || exit 1; done" >/dev/null &&
    g "$1" cat "/tmp/bpf-$2.txt" >"$3"
}
bundle_of() { domain_field "$1" bundle; }

say "1. libvirtd, four domains (TCG, 1 vCPU, 320 MiB), the agent"
"$LV" start-daemon >/dev/null
for d in $DOMS; do "$LV" undefine "$d" >/dev/null 2>&1 || true; done
"$LV" define "$BUILD/vm-image" --name kthost-ag0 --accel tcg --vcpus 1 --mem 320 --no-channel --no-plugin >/dev/null
"$LV" define "$BUILD/vm-image" --name kthost-ag1 --accel tcg --vcpus 1 --mem 320 --on-reboot restart >/dev/null
"$LV" define "$BUILD/vm-image" --name kthost-ag2 --accel tcg --vcpus 1 --mem 320 >/dev/null
virsh -q -c qemu:///system metadata kthost-ag2 --uri urn:kthost:agent:1 --key kthost --config \
  --set "<trace enabled='yes' tag='farm'/>" >/dev/null
"$LV" define "$BUILD/vm-image" --name kthost-ag3 --accel tcg --vcpus 1 --mem 320 --ram none >/dev/null
"$K" agent --output "$OUT" --socket "$SOCK" --match 'kthost-ag1,kthost-ag3,farm' >"$W/agent.log" 2>&1 &
AGENT=$!
pids=""
for d in $DOMS; do "$LV" start "$d" --timeout 300 >"$W/start-$d.log" 2>&1 & pids="$pids $!"; done
for p in $pids; do wait "$p" || { cat "$W"/start-*.log; say "a domain did not boot"; exit 1; }; done
wait_ready kthost-ag1 kthost-ag2 kthost-ag3
"$K" agent --status --socket "$SOCK"
check "ag3 (anonymous RAM) is read through QEMU process memory" \
  [ "$(domain_field kthost-ag3 memory_backend)" = process ]
check "ag3's log says why: no shared RAM backing, so QEMU process memory" \
  grep -q "domain kthost-ag3: warning: .*no shared RAM backing" "$W/agent.log"
check "ag1 and ag2 (shared RAM) are read through the mapping" \
  [ "$(domain_field kthost-ag1 memory_backend)$(domain_field kthost-ag2 memory_backend)" = mmapmmap ]
check "every traced domain has software PT" \
  [ "$(for d in 1 2 3; do domain_field kthost-ag$d pt_source; done | sort -u)" = software ]
check "ag0 (no channel) is listed as not traced, with why" \
  python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if any(x["name"]=="kthost-ag0" and "org.kthost.0" in x["why"] for x in s["skipped"]) else 1)' \
  < <(status_json)

say "2. three workloads at once (BPF seeds 11, 12, 13; module cycles)"
pids=""
for i in 1 2 3; do workload kthost-ag$i 1$i "$W/ag$i-bpf1.txt" & pids="$pids $!"; done
for p in $pids; do wait "$p" || { say "a workload failed"; exit 1; }; done
for i in 1 2 3; do echo "kthost-ag$i $(bundle_of kthost-ag$i)"; done >"$W/bundles-1.txt"
holds_before=$(for i in 1 2; do domain_field kthost-ag$i holds; done | paste -sd' ')

say "3. kthost-ag3 destroyed mid-trace"
ag3_bundle=$(bundle_of kthost-ag3)
virsh -q -c qemu:///system destroy kthost-ag3 >/dev/null
deadline=$((SECONDS + 60))
until [ -f "$ag3_bundle/summary.json" ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
check "ag3's bundle was closed (summary.json)" [ -f "$ag3_bundle/summary.json" ]
check "ag3's bundle reads back (kthost report)" bash -c "'$K' report '$ag3_bundle' --json --quiet >'$W/ag3-report.json'"
check "ag3's BPF text: its own 8 programs" "$CHECK_BPF" "$ag3_bundle" "$W/ag3-bpf1.txt"
say "   ag1 and ag2 go on: a second workload each (seeds 21, 22)"
pids=""
for i in 1 2; do workload kthost-ag$i 2$i "$W/ag$i-bpf2.txt" & pids="$pids $!"; done
for p in $pids; do wait "$p" || { say "a workload after the destroy failed"; exit 1; }; done
holds_after=$(for i in 1 2; do domain_field kthost-ag$i holds; done | paste -sd' ')
say "   holds of ag1 ag2: before the destroy $holds_before, after $holds_after"
check "ag1 and ag2 holds went on being answered" python3 -c '
import sys
b, a = [list(map(int, x.split())) for x in sys.argv[1:3]]
sys.exit(0 if all(y > x for x, y in zip(b, a)) else 1)' "$holds_before" "$holds_after"

say "4. kthost-ag2's QEMU killed (a crash), then the domain started again"
ag2_first=$(bundle_of kthost-ag2)
ag2_qemu=$(cat /run/libvirt/qemu/kthost-ag2.pid)
kill -KILL "$ag2_qemu"
deadline=$((SECONDS + 60))
until [ "$(virsh -q -c qemu:///system domstate kthost-ag2 2>/dev/null)" = "shut off" ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
"$LV" start kthost-ag2 --timeout 300 >"$W/restart-ag2.log" 2>&1 || { cat "$W/restart-ag2.log"; exit 1; }
deadline=$((SECONDS + 60))
until [ -n "$(bundle_of kthost-ag2)" ] && [ "$(bundle_of kthost-ag2)" != "$ag2_first" ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
wait_ready kthost-ag2
ag2_second=$(bundle_of kthost-ag2)
say "   first $ag2_first, second $ag2_second"
check "ag2's second bundle is in a new boot directory" \
  [ "$(dirname "$ag2_first")" != "$(dirname "$ag2_second")" -a "$(dirname "$(dirname "$ag2_second")")" = "$OUT/kthost-ag2" ]
workload kthost-ag2 32 "$W/ag2-bpf3.txt"

say "5. libvirtd restarted under the agent"
ag1_before=$(bundle_of kthost-ag1)
ag2_before=$(bundle_of kthost-ag2)
libvirtd_pid=$(cat /run/libvirtd.pid)
kill "$libvirtd_pid"
while kill -0 "$libvirtd_pid" 2>/dev/null; do sleep 0.2; done
sleep 2
"$LV" start-daemon >/dev/null
deadline=$((SECONDS + 90))
until [ "$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["libvirt_reconnects"])')" -ge 1 ] 2>/dev/null &&
      [ -n "$(bundle_of kthost-ag1)" ] && [ "$(bundle_of kthost-ag1)" != "$ag1_before" ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
wait_ready kthost-ag1 kthost-ag2
ag1_after=$(bundle_of kthost-ag1)
say "   ag1 before $ag1_before, after $ag1_after"
check "the agent reconnected to libvirt" \
  [ "$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["libvirt_reconnects"])')" -ge 1 ]
check "ag1 traces on in a new bundle of the same boot" \
  [ "$ag1_after" != "$ag1_before" -a "$(dirname "$ag1_after")" = "$(dirname "$ag1_before")" ]
check "ag2 traces on too: every running domain resumed" \
  [ "$(bundle_of kthost-ag2)" != "$ag2_before" -a "$(dirname "$(bundle_of kthost-ag2)")" = "$(dirname "$ag2_before")" ]
workload kthost-ag1 41 "$W/ag1-bpf4.txt"  # checked once the bundle is closed (step 8)

say "5b. kthost-ag1 reset in place (virsh reset): a new boot directory, -r1"
virsh -q -c qemu:///system reset kthost-ag1 >/dev/null
deadline=$((SECONDS + 60))
until bundle_of kthost-ag1 | grep -q -- '-r1/' || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
sleep 5
wait_ready kthost-ag1
ag1_reset=$(bundle_of kthost-ag1)
say "   ag1 after the reset: $ag1_reset"
check "ag1's bundle after the reset is in the boot directory -r1 beside the first" \
  [ "$(dirname "$ag1_reset")" = "$(dirname "$ag1_after")-r1" ]
check "the bundle before the reset was closed, saying so" \
  grep -q "rebooted" "$ag1_after/summary.json"
workload kthost-ag1 51 "$W/ag1-bpf5.txt"  # checked once the bundle is closed (step 8)

say "6. status and metrics"
"$K" agent --status --socket "$SOCK" | tee "$W/status.txt"
status_json >"$W/status.json"
"$K" agent --status --metrics --socket "$SOCK" >"$W/metrics.txt"
check "metrics: well-formed, every traced domain with holds > 0, ag2 with 2 bundles" python3 - "$W/metrics.txt" <<'PY'
import re, sys
line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')
typed, samples = set(), {}
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# TYPE "):
        typed.add(line.split()[2]); continue
    if line.startswith("#") or not line: continue
    m = line_re.match(line)
    assert m, f"not a sample: {line}"
    assert m.group(1) in typed, f"no TYPE for {m.group(1)}"
    labels = dict(label_re.findall(m.group(3) or ""))
    samples[(m.group(1), labels.get("domain", ""))] = float(m.group(4))
for d in ("kthost-ag1", "kthost-ag2", "kthost-ag3"):
    assert samples.get(("kthost_domain_holds_total", d), 0) > 0, f"{d}: no holds in the metrics"
assert samples[("kthost_domain_bundles_total", "kthost-ag2")] >= 2, "ag2: fewer than 2 bundles"
assert samples[("kthost_agent_libvirt_connected", "")] == 1
print("metrics: %d samples" % len(samples))
PY

say "7. SIGTERM: every bundle closed"
kill -TERM "$AGENT"
rc=0
timeout 120 tail --pid="$AGENT" -f /dev/null || rc=$?
wait "$AGENT" || rc=$?
AGENT=""
check "the agent exited 0 on SIGTERM" [ "$rc" = 0 ]
tail -n 5 "$W/agent.log"
check "every bundle has its summary.json" bash -c "! find '$OUT' -mindepth 3 -maxdepth 3 -type d '!' -exec test -f '{}/summary.json' ';' -print | grep -q ."
find "$OUT" -mindepth 3 -maxdepth 3 -type d | sort | tee "$W/bundles.txt"

say "8. BPF text: each bundle holds its own guest's JIT bytes, and none of another's"
ag1=$(awk '$1=="kthost-ag1"{print $2}' "$W/bundles-1.txt")
check "ag1: its 16 programs (two workloads)" bash -c "'$CHECK_BPF' '$ag1' '$W/ag1-bpf1.txt' && '$CHECK_BPF' '$ag1' '$W/ag1-bpf2.txt'"
check "ag2 first boot: its 16 programs" bash -c "'$CHECK_BPF' '$ag2_first' '$W/ag2-bpf1.txt' && '$CHECK_BPF' '$ag2_first' '$W/ag2-bpf2.txt'"
check "ag2 second boot: the 8 loaded after the restart" "$CHECK_BPF" "$ag2_second" "$W/ag2-bpf3.txt"
check "ag1 after the libvirtd restart: its 8 new programs" "$CHECK_BPF" "$ag1_after" "$W/ag1-bpf4.txt"
check "ag1 after the reset: its 8 new programs" "$CHECK_BPF" "$ag1_reset" "$W/ag1-bpf5.txt"
crosstalk() {  # crosstalk BUNDLE PROBE: exit 0 when none of PROBE's programs is in BUNDLE
  { "$CHECK_BPF" "$1" "$2" --json || true; } | python3 -c 'import json,sys; r=json.load(sys.stdin); sys.exit(0 if r["matched"]==0 and r["programs"]>0 else 1)'
}
for pair in "$ag1:ag2-bpf1 ag2-bpf2 ag3-bpf1" "$ag2_first:ag1-bpf1 ag1-bpf2 ag3-bpf1" "$ag3_bundle:ag1-bpf1 ag2-bpf1"; do
  b=${pair%%:*}
  for other in ${pair#*:}; do check "no cross-talk: $(basename "$(dirname "$(dirname "$b")")") holds none of $other" crosstalk "$b" "$W/$other.txt"; done
done
say "9. a second agent, through an explicit libvirt socket, on ag1 and ag2: rotation every 12 s and a 150 MiB"
say "   domain disk budget; ag1 already has 130 MiB of earlier bundles, ag2 none"
SOCK=$W/agent2.sock
mkdir -p "$W/out2/kthost-ag1/earlier"
truncate -s 130M "$W/out2/kthost-ag1/earlier/pt-cpu0"
"$K" agent --connect 'qemu+unix:///system?socket=/var/run/libvirt/libvirt-sock' \
  --output "$W/out2" --socket "$SOCK" --match 'kthost-ag1,farm' --rotate-time 12 --max-domain-disk 150M \
  >"$W/agent2.log" 2>&1 &
AGENT=$!
deadline=$((SECONDS + 180))
until [ "$(domain_field kthost-ag1 state 2>/dev/null)" = overbudget ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
until [ "$(domain_field kthost-ag2 bundles 2>/dev/null || echo 0)" -ge 3 ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
check "ag2 goes on tracing (and rotating) while ag1 is over its budget" \
  [ "$(domain_field kthost-ag2 state)" = tracing -a "$(domain_field kthost-ag1 state)" = overbudget ]
"$K" agent --status --socket "$SOCK" | tee "$W/status2.txt"
"$K" agent --status --metrics --socket "$SOCK" >"$W/metrics2.txt"
check "ag1 stopped by its disk budget, counted, with untraced time" python3 - "$W/metrics2.txt" <(status_json) <<'PY'
import json, re, sys
metrics = open(sys.argv[1]).read()
status = json.load(open(sys.argv[2]))
d = [x for x in status["domains"] if x["name"] == "kthost-ag1"][-1]
assert d["state"] == "overbudget", d
assert d["budget_stops"].get("domain_disk", 0) >= 1, d
assert d["untraced_seconds"] > 0, d
assert re.search(r'^kthost_domain_budget_stops_total\{domain="kthost-ag1",budget="domain_disk"\} [1-9]', metrics, re.M), "no budget stop in the metrics"
print("budget: %d stop(s), %.1f s untraced, %d bundles" % (d["budget_stops"]["domain_disk"], d["untraced_seconds"], d["bundles"]))
PY
kill -TERM "$AGENT"
timeout 120 tail --pid="$AGENT" -f /dev/null || true
wait "$AGENT" || true
AGENT=""
check "ag1's bundle ended by the budget, ag2's by rotation, each named in its summary.json" \
  python3 - "$W/out2/kthost-ag1" "$W/out2/kthost-ag2" <<'PY'
import glob, json, sys
def ends(d):
    return [json.load(open(f)).get("end", "") for f in sorted(glob.glob(d + "/*/*/summary.json"))]
a, b = ends(sys.argv[1]), ends(sys.argv[2])
print("ag1 bundle end reasons:", a)
print("ag2 bundle end reasons:", b)
assert a and "budget" in a[-1], a
assert sum(e == "rotation: time" for e in b) >= 2, b
assert not any("budget" in e for e in b), b
PY
say "10. a third agent: a 1 MiB/s PT-rate budget (4 s cool-down) and metrics on a loopback port, on ag2 kept busy"
SOCK=$W/agent3.sock
port=$((20000 + RANDOM % 20000))
"$K" agent --output "$W/out3" --socket "$SOCK" --match farm --max-pt-rate 1M --pt-cooldown 4 \
  --metrics-listen "127.0.0.1:$port" >"$W/agent3.log" 2>&1 &
AGENT=$!
wait_ready kthost-ag2
g kthost-ag2 'end=$(( $(date +%s) + 25 )); while [ $(date +%s) -lt $end ]; do cat /proc/kallsyms >/dev/null; done' >/dev/null
python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "http://127.0.0.1:$port/metrics" >"$W/metrics3.txt" || say "no answer on 127.0.0.1:$port"
check "ag2 stopped by the PT-rate budget and resumed after its cool-down; metrics on the loopback port say so" \
  python3 - "$W/metrics3.txt" <(status_json) <<'PY'
import json, re, sys
metrics = open(sys.argv[1]).read()
d = [x for x in json.load(open(sys.argv[2]))["domains"] if x["name"] == "kthost-ag2"][-1]
stops = d["budget_stops"].get("pt_rate", 0)
print("PT-rate budget: %d stop(s), %d bundles, %.1f s untraced" % (stops, d["bundles"], d["untraced_seconds"]))
assert stops >= 1 and d["bundles"] >= 2 and d["untraced_seconds"] >= 4, d
assert re.search(r'^kthost_domain_budget_stops_total\{domain="kthost-ag2",budget="pt_rate"\} [1-9]', metrics, re.M), "no PT-rate stop in the port's metrics"
PY
kill -TERM "$AGENT"; wait "$AGENT" || true; AGENT=""

say "11. a fourth agent with a 1 MiB memory budget: nothing is traced, and that is counted"
SOCK=$W/agent4.sock
"$K" agent --output "$W/out4" --socket "$SOCK" --match kthost-ag1 --max-memory 1M >"$W/agent4.log" 2>&1 &
AGENT=$!
deadline=$((SECONDS + 30))
until [ "$(domain_field kthost-ag1 state 2>/dev/null)" = overbudget ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
sleep 2
check "ag1 untraced under the memory budget, counted" python3 -c '
import json, sys
d = [x for x in json.load(sys.stdin)["domains"] if x["name"] == "kthost-ag1"][-1]
print("memory budget:", d["budget_stops"], "%.1f s untraced" % d["untraced_seconds"])
sys.exit(0 if d["state"] == "overbudget" and d["budget_stops"].get("memory", 0) >= 1 and d["bundles"] == 0 else 1)' < <(status_json)
kill -TERM "$AGENT"; wait "$AGENT" || true; AGENT=""
say "12. a fifth agent, ag1's bundles on a full disk (a 32 MiB tmpfs: the kcore and kallsyms take 21): ag1's trace"
say "    fails (ENOSPC), is reported and retried with back-off, ag2's goes on; then kill -9 of the agent mid-workload:"
say "    the guests run on, and no unload waits past ktguard's timeout"
SOCK=$W/agent5.sock
FULL=$W/out5/kthost-ag1
mkdir -p "$FULL"
mount -t tmpfs -o size=32m kthost-agent-test-full "$FULL"
"$K" agent --output "$W/out5" --socket "$SOCK" --match 'kthost-ag1,farm' >"$W/agent5.log" 2>&1 &
AGENT=$!
wait_ready kthost-ag2
holds_before=$(domain_field kthost-ag2 holds)
g kthost-ag1 'end=$(( $(date +%s) + 20 )); while [ $(date +%s) -lt $end ]; do cat /proc/kallsyms >/dev/null; done' >/dev/null &
wl=$!
workload kthost-ag2 31 "$W/ag2-bpf-full.txt"
wait $wl || true
deadline=$((SECONDS + 60))
until [ "$(domain_field kthost-ag1 failures 2>/dev/null || echo 0)" -ge 2 ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
"$K" agent --status --socket "$SOCK" | tee "$W/status5.txt"
check "ag1 on a full disk: failed with ENOSPC, reported, retried with back-off; ag2 traced on, its holds answered" \
  python3 - "$holds_before" "$W/agent5.log" <(status_json) <<'PY'
import json, sys
s = json.load(open(sys.argv[3]))
ag1 = [x for x in s["domains"] if x["name"] == "kthost-ag1"][-1]
ag2 = [x for x in s["domains"] if x["name"] == "kthost-ag2"][-1]
log = open(sys.argv[2]).read()
print("ag1: state %s, %d failures, last error: %s" % (ag1["state"], ag1["failures"], ag1["last_error"]))
print("ag2: state %s, holds %s -> %d" % (ag2["state"], sys.argv[1], ag2["holds"]))
assert ag1["failures"] >= 2 and "No space left on device" in ag1["last_error"], ag1
assert "No space left on device" in log, "the agent's log does not say why"
assert ag2["state"] == "tracing" and ag2["failures"] == 0 and ag2["holds"] > int(sys.argv[1]), ag2
PY
for i in 1 2; do
  g kthost-ag$i "echo reset >/sys/module/ktguard/parameters/hold_hist; rm -f /tmp/kill.done;
    (ktprobe bpf-stress --count 60 --kinds socket,xdp --out /tmp/bpf-kill.txt >/tmp/bpf-kill.json 2>&1;
     for j in 1 2 3; do insmod /lib/kthost-test/dummy.ko && rmmod dummy; done; echo done >/tmp/kill.done) </dev/null >/dev/null 2>&1 &" >/dev/null
done
sleep 2
kill -KILL "$AGENT"
wait "$AGENT" 2>/dev/null || true
AGENT=""
for i in 1 2; do
  deadline=$((SECONDS + 240))
  until g kthost-ag$i test -f /tmp/kill.done >/dev/null 2>&1 || [ $SECONDS -ge $deadline ]; do sleep 1; done
  check "ag$i is running after the agent's kill -9" [ "$(virsh -q -c qemu:///system domstate kthost-ag$i)" = running ]
  g kthost-ag$i cat /tmp/bpf-kill.json >"$W/ag$i-bpf-kill.json" 2>&1 || true
  check "ag$i's workload finished, every program loaded" grep -q '"failed":0' "$W/ag$i-bpf-kill.json"
  g kthost-ag$i cat /sys/module/ktguard/parameters/stats >"$W/ag$i-guard-stats.txt"
  check "ag$i: the longest hold ended by ktguard's timeout (200 ms) at the latest" python3 - "$W/ag$i-guard-stats.txt" <<'PY'
import sys
s = {k: int(v) for k, v in (l.split("=", 1) for l in open(sys.argv[1]).read().split() if "=" in l and l.split("=", 1)[1].isdigit())}
print("ktguard: longest hold %.1f ms, %d timeouts, %d reader gone" % (s["hold_ns_max"] / 1e6, s.get("timeouts", 0), s.get("reader_gone", 0)))
sys.exit(0 if s["hold_ns_max"] < 250_000_000 else 1)
PY
done
umount "$FULL"
[ $failed = 0 ] || { say "FAILED (see above; agent logs $W/agent*.log)"; exit 1; }
say "all checks passed"
