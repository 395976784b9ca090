#!/bin/sh
# End-to-end check of the software PT plugin: boot the test image under TCG
# with ktpt.so (ground truth on), trace a syscall workload, snapshot the
# kernel text, stop the guest, then decode every vCPU's PT over the snapshot's
# kcore and compare with the ground truth.
#
#   tests/vm/run-pt-e2e.sh BUILD_DIR [IMAGE_DIR] [KTHOST] [ITERATIONS]
#
# IMAGE_DIR defaults to BUILD_DIR/vm-image, KTHOST to BUILD_DIR/host/cli/kthost.
# Leaves everything in $KTPT_E2E_DIR (default /tmp/ktpt-e2e).  Exits non-zero
# if a step fails or the agreement of any vCPU is below $KTPT_MIN_AGREEMENT
# (default 99.99).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run-pt-e2e.sh BUILD_DIR [IMAGE_DIR] [KTHOST] [ITERATIONS]}" && pwd)
image=${2:-$build/vm-image}
kthost=${3:-$build/host/cli/kthost}
iterations=${4:-30}
dir=${KTPT_E2E_DIR:-/tmp/ktpt-e2e}
min=${KTPT_MIN_AGREEMENT:-99.99}
rm -rf "$dir"
mkdir -p "$dir"
state=$dir/vm
trigger=$dir/trace-on

stop_vm() { [ -f "$state/vm.json" ] && "$src/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true; }
trap stop_vm EXIT INT TERM

"$src/vm-images/ktvm" start --image "$image" --state-dir "$state" --smp 2 --accel tcg \
  --boot-timeout 300 --plugin "$build/pt-plugin/ktpt.so,out=$dir/pt,gt=on,trigger=$trigger" >/dev/null
workload="i=0; while [ \$i -lt $iterations ]; do cat /proc/self/stat /proc/uptime >/dev/null; ls / /proc/self >/dev/null; i=\$((i+1)); done"
touch "$trigger"
sleep 0.1
"$kthost" exec --vm "$state/vm.json" --timeout 600 -- "$workload"
rm -f "$trigger"
sleep 0.2
"$kthost" snapshot --vm "$state/vm.json" -o "$dir/snap" >/dev/null
stop_vm
trap - EXIT INT TERM

status=0
for pt in "$dir"/pt/cpu*.pt; do
  cpu=$(basename "$pt" .pt)
  echo "== $cpu"
  cat "$dir/pt/$cpu.stats"
  "$build/pt-plugin/ktpt-compare" --kcore "$dir/snap/kcore" --pt "$pt" --gt "$dir/pt/$cpu.gt" --examples 12 \
    | tee "$dir/$cpu.compare"
  pct=$(sed -n 's/^agreement: \([0-9.]*\)%$/\1/p' "$dir/$cpu.compare")
  if [ -z "$pct" ] || ! awk -v p="$pct" -v m="$min" 'BEGIN { exit !(p >= m) }'; then
    echo "FAIL: $cpu agreement ${pct:-?}% < $min%"
    status=1
  fi
done
exit $status
