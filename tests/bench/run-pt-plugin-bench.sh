#!/bin/sh
# Guest slowdown of the software PT plugin, and its output rate.
# Boots the test image twice under TCG (--smp 2), once without the plugin and
# once with ktpt.so tracing (no ground truth), runs the same syscall workload,
# and times it inside the guest (/proc/uptime; under TCG without icount the
# guest clock follows the host's) and from the host (kthost exec round trip).
#
#   tests/bench/run-pt-plugin-bench.sh BUILD_DIR [IMAGE_DIR] [KTHOST] [ITERATIONS]
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run-pt-plugin-bench.sh BUILD_DIR [IMAGE_DIR] [KTHOST] [ITERATIONS]}" && pwd)
image=${2:-$build/vm-image}
kthost=${3:-$build/host/cli/kthost}
iterations=${4:-200}
dir=${KTPT_BENCH_DIR:-/tmp/ktpt-bench}
rm -rf "$dir"
mkdir -p "$dir"
state=$dir/vm
stop_vm() { [ -f "$state/vm.json" ] && "$src/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true; }
trap stop_vm EXIT INT TERM

workload="i=0; while [ \$i -lt $iterations ]; do cat /proc/self/stat /proc/uptime >/dev/null; ls / /proc/self >/dev/null; i=\$((i+1)); done"
timed="read a _ </proc/uptime; $workload; read b _ </proc/uptime; echo \"guest_seconds \$a \$b\""

run_case() {  # name, plugin-arg-or-empty
  if [ -n "$2" ]; then
    "$src/vm-images/ktvm" start --image "$image" --state-dir "$state" --smp 2 --accel tcg --boot-timeout 300 \
      --plugin "$2" >/dev/null
  else
    "$src/vm-images/ktvm" start --image "$image" --state-dir "$state" --smp 2 --accel tcg --boot-timeout 300 >/dev/null
  fi
  "$kthost" exec --vm "$state/vm.json" -- "i=0; while [ \$i -lt 5 ]; do ls / >/dev/null; i=\$((i+1)); done"  # warm up
  touch "$dir/trace-on"
  t0=$(date +%s.%N)
  out=$("$kthost" exec --vm "$state/vm.json" --timeout 900 -- "$timed")
  t1=$(date +%s.%N)
  rm -f "$dir/trace-on"
  stop_vm
  guest=$(echo "$out" | awk '/guest_seconds/ { printf "%.2f", $3 - $2 }')
  host=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  echo "$1 guest_s=$guest host_s=$host"
  echo "$1 $guest $host" >>"$dir/results"
}

run_case no-plugin ""
run_case plugin "$build/pt-plugin/ktpt.so,out=$dir/pt,trigger=$dir/trace-on"
trap - EXIT INT TERM

awk '{ t[$1] = $2; h[$1] = $3 } END {
  printf "slowdown (guest clock): %.2fx   (host clock): %.2fx\n", t["plugin"] / t["no-plugin"], h["plugin"] / h["no-plugin"] }' "$dir/results"
bytes=0; insns=0
for s in "$dir"/pt/cpu*.stats; do
  bytes=$((bytes + $(sed -n 's/^pt_bytes=//p' "$s")))
  insns=$((insns + $(sed -n 's/^kernel_insns=//p' "$s")))
done
awk -v b="$bytes" -v n="$insns" 'BEGIN { printf "PT bytes: %d for %d kernel instructions = %.0f bytes per million instructions (%.3f bits/insn)\n", b, n, b * 1e6 / n, b * 8 / n }'
