#!/bin/bash
# What CI regression tracing costs (scripts/kthost-ci.sh), against the
# workload's own run time in the same TCG guest without kthost.
#   baseline  the default image booted under TCG without the PT plugin; the
#             workload run RUNS times with kthost exec (host wall time)
#   kthost-ci the same image on both sides, RUNS traced runs each: per kernel
#             the boot, and per run kthost trace -- WORKLOAD and kthost report
#             (--json --folded); then one kthost diff
# Printed: min / median / max of every step, and the ratio of a run's cost
# (trace + report + its share of the diff) to the baseline's median.
# Goal (#14): trace + report + diff <= 2x the workload's own run time.
#
# usage: tests/bench/run-ci-bench.sh BUILD_DIR    (RUNS=N, default 3; ITER=N workload loops, default 200)
set -euo pipefail
BUILD=$(cd "${1:?usage: run-ci-bench.sh BUILD_DIR}" && pwd)
RUNS=${RUNS:-3}
ITER=${ITER:-200}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
K=$BUILD/host/cli/kthost
W=$(mktemp -d /tmp/kthost-ci-bench-XXXXXX)
VM=""
cleanup() { [ -z "$VM" ] || "$SRC/vm-images/ktvm" stop --vm "$VM" >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT INT TERM
sed "s/-lt 20 ]/-lt $ITER ]/" "$SRC/tests/vm/ktregress/syscalls.sh" >"$W/workload.sh"
grep -q -- "-lt $ITER ]" "$W/workload.sh" || { echo "could not scale the workload"; exit 1; }

echo "ci bench: workload tests/vm/ktregress/syscalls.sh with $ITER loops, $RUNS runs"
"$SRC/vm-images/ktvm" start --image "$BUILD/vm-image" --state-dir "$W/base-vm" --name ci-bench --accel tcg >/dev/null
VM=$W/base-vm/vm.json
script=$(cat "$W/workload.sh")
"$K" exec --vm "$VM" --timeout 600 -- "$script" >/dev/null  # warm-up
for i in $(seq 1 "$RUNS"); do
  t=$(date +%s.%N)
  "$K" exec --vm "$VM" --timeout 600 -- "$script" >/dev/null
  echo "baseline	workload	$i	$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')" >>"$W/baseline.tsv"
done
"$SRC/vm-images/ktvm" stop --vm "$VM" >/dev/null 2>&1 || true
VM=""

set +e
"$SRC/scripts/kthost-ci.sh" --build "$BUILD" --base "$BUILD/vm-image" --new "$BUILD/vm-image" \
  --workload "$W/workload.sh" --runs "$RUNS" --out "$W/ci" >"$W/ci.md" 2>"$W/ci.log"
status=$?
set -e
[ $status -le 1 ] || { tail -n 20 "$W/ci.log"; echo "kthost-ci.sh exited $status"; exit 1; }
python3 - "$W/baseline.tsv" "$W/ci/timings.json" "$RUNS" <<'EOF'
import json, statistics, sys
base = [float(l.split("\t")[3]) for l in open(sys.argv[1]) if l.strip()]
rows = json.load(open(sys.argv[2]))
runs = int(sys.argv[3])
def stats(xs):
    return f"{min(xs):7.2f} {statistics.median(xs):7.2f} {max(xs):7.2f}"
def step(side, name):
    return [r["seconds"] for r in rows if (side is None or r["side"] == side) and r["step"] == name]
print(f"{'step (seconds)':38} {'min':>7} {'median':>7} {'max':>7}")
print(f"{'baseline: workload, TCG, no plugin':38} {stats(base)}")
print(f"{'kthost-ci: workload, plugin loaded, off':38} {stats(step(None, 'workload-untraced'))}")
print(f"{'kthost-ci: boot':38} {stats(step(None, 'boot'))}")
print(f"{'kthost-ci: kthost trace -- WORKLOAD':38} {stats(step(None, 'trace'))}")
print(f"{'kthost-ci: kthost report':38} {stats(step(None, 'report'))}")
diff = step("all", "diff")
print(f"{'kthost-ci: kthost diff (once)':38} {stats(diff)}")
per_run = [t + r + diff[0] / (2 * runs) for t, r in zip(step(None, "trace"), step(None, "report"))]
m = statistics.median(base)
ratios = [x / m for x in per_run]
print(f"{'per run: trace + report + diff share':38} {stats(per_run)}")
print(f"ratio to the baseline's median {m:.2f} s: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x, "
      f"max {max(ratios):.2f}x (goal <= 2x)")
tr = [t / m for t in step(None, "trace")]
print(f"trace alone: min {min(tr):.2f}x, median {statistics.median(tr):.2f}x, max {max(tr):.2f}x")
EOF
