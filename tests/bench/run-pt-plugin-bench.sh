#!/bin/sh
# Guest slowdown of the software PT plugin, and its output rate.
# Boots the test image twice under TCG (--smp 2): once without the plugin, and
# once with ktpt.so (no ground truth). The same syscall workload runs ROUNDS
# times in each (default 3) and is timed inside the guest (/proc/uptime; under
# TCG without icount the guest clock follows the host's). In the plugin's
# boot the rounds alternate: the plugin loaded with tracing off (its trigger
# absent), then tracing on. Prints min / median / max of each case and the
# ratios against the no-plugin baseline of the same run.
#
#   tests/bench/run-pt-plugin-bench.sh BUILD_DIR [IMAGE_DIR] [KTHOST] [ITERATIONS] [ROUNDS]
#   KTPT_BENCH_ARGS=",key=value..." adds plugin arguments (an experiment).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run-pt-plugin-bench.sh BUILD_DIR [IMAGE_DIR] [KTHOST] [ITERATIONS] [ROUNDS]}" && pwd)
image=${2:-$build/vm-image}
kthost=${3:-$build/host/cli/kthost}
iterations=${4:-200}
rounds=${5:-3}
dir=${KTPT_BENCH_DIR:-/tmp/ktpt-bench}
rm -rf "$dir"
mkdir -p "$dir/pt"
state=$dir/vm
stop_vm() { [ -f "$state/vm.json" ] && "$src/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true; }
trap stop_vm EXIT INT TERM

workload="i=0; while [ \$i -lt $iterations ]; do cat /proc/self/stat /proc/uptime >/dev/null; ls / /proc/self >/dev/null; i=\$((i+1)); done"
timed="read a _ </proc/uptime; $workload; read b _ </proc/uptime; echo \"guest_seconds \$a \$b\""

boot() {  # [plugin argument]
  if [ -n "${1:-}" ]; then
    "$src/vm-images/ktvm" start --image "$image" --state-dir "$state" --smp 2 --accel tcg --boot-timeout 300 \
      --plugin "$1" >/dev/null
  else
    "$src/vm-images/ktvm" start --image "$image" --state-dir "$state" --smp 2 --accel tcg --boot-timeout 300 >/dev/null
  fi
  "$kthost" exec --vm "$state/vm.json" -- "i=0; while [ \$i -lt 5 ]; do ls / >/dev/null; i=\$((i+1)); done"  # warm up
}

measure() {  # case name
  out=$("$kthost" exec --vm "$state/vm.json" --timeout 900 -- "$timed")
  guest=$(echo "$out" | awk '/guest_seconds/ { printf "%.3f", $3 - $2 }')
  [ -n "$guest" ] || { echo "run-pt-plugin-bench: no guest time from the workload: $out" >&2; exit 1; }
  echo "$1 round $r: ${guest} s"
  echo "$1 $guest" >>"$dir/results"
}

boot
r=1
while [ "$r" -le "$rounds" ]; do measure no-plugin; r=$((r + 1)); done
stop_vm

boot "$build/pt-plugin/ktpt.so,out=$dir/pt,trigger=$dir/trace-on${KTPT_BENCH_ARGS:-}"
r=1
while [ "$r" -le "$rounds" ]; do
  measure plugin-off
  touch "$dir/trace-on"
  measure plugin-on
  rm -f "$dir/trace-on"
  sleep 0.1  # the plugin polls its trigger every 20 ms
  r=$((r + 1))
done
stop_vm  # the plugin writes cpuN.stats at exit
trap - EXIT INT TERM

python3 - "$dir/results" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, seconds = line.split()
    runs.setdefault(name, []).append(float(seconds))
base = statistics.median(runs["no-plugin"])
def row(name, values):
    return f"{name:30} min {min(values):7.2f}  median {statistics.median(values):7.2f}  max {max(values):7.2f} s"
print(f"guest seconds for the workload, {len(runs['no-plugin'])} rounds each:")
print(row("TCG, no plugin (baseline)", runs["no-plugin"]))
for name, label in (("plugin-off", "plugin loaded, tracing off"), ("plugin-on", "plugin tracing")):
    v = runs[name]
    print(row(label, v) + f"   slowdown vs the baseline's median: min {min(v)/base:.2f}x  median "
          f"{statistics.median(v)/base:.2f}x  max {max(v)/base:.2f}x")
EOF
bytes=0; insns=0; blocks=0
for s in "$dir"/pt/cpu*.stats; do
  bytes=$((bytes + $(sed -n 's/^pt_bytes=//p' "$s")))
  insns=$((insns + $(sed -n 's/^kernel_insns=//p' "$s")))
  blocks=$((blocks + $(sed -n 's/^kernel_blocks=//p' "$s")))
done
awk -v b="$bytes" -v n="$insns" -v k="$blocks" 'BEGIN {
  printf "PT bytes: %d for %d kernel instructions in %d blocks = %.0f bytes per million instructions (%.3f bits/insn)\n",
         b, n, k, b * 1e6 / n, b * 8 / n }'
