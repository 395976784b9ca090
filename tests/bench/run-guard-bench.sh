#!/bin/sh
# The unload guard's cost, in one run on one TCG guest:
#   1. hold durations over a stress (1000 BPF programs of 4 kinds, 40
#      fentry/fexit programs with trampolines, 50 module cycles) with
#      `kthost trace` attached: median, p99, max, from ktguard's histogram;
#   2. the guest-side slowdown of an unload with the guard vs without:
#      delete_module of a module (synchronous: it waits for its hold), 50
#      cycles each way, and the BPF stress's wall time each way.
# Target (TCG, this machine): median hold <= 2 ms, p99 <= 20 ms.
#
# usage: tests/bench/run-guard-bench.sh BUILD_DIR
set -eu
BUILD=${1:?usage: run-guard-bench.sh BUILD_DIR}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
K=$BUILD/host/cli/kthost
STATE=$(mktemp -d /tmp/kthost-guard-bench-XXXXXX)
trap '"$SRC/vm-images/ktvm" stop --vm "$STATE/vm/vm.json" >/dev/null 2>&1 || true; kill $TRACE 2>/dev/null || true; rm -rf "$STATE"' EXIT
TRACE=""
g() { "$K" exec --vm "$STATE/vm/vm.json" --timeout 600 -- "$@"; }

echo "guard bench: booting a TCG guest (2 vCPUs, 1 GiB)"
"$SRC/vm-images/ktvm" start --image "$BUILD/vm-image" --state-dir "$STATE/vm" --name guardbench --mem 1G --smp 2 >/dev/null
g test -d /sys/module/ktguard || { echo "guard bench: the image has no ktguard" >&2; exit 1; }

MOD="--count 50 --module /lib/kthost-test/dummy.ko --name dummy"
BPF="--count 1000 --kinds socket,xdp,tracepoint,kprobe --out /tmp/b.txt"
TRAMP="--count 40 --kinds fentry,fexit --seed 2 --out /tmp/t.txt"
# Each phase runs in the guest as one command (one exec connection), its
# results separated by marker lines.
section() { echo "$1" | sed -n "/^== $2\$/,/^== /p" | sed '1d;/^== /d'; }

echo "guard bench: without the guard (no host attached: frees are not held)"
off=$(g "echo '== mod'; ktprobe module-cycle $MOD; echo '== bpf'; ktprobe bpf-stress $BPF; sleep 3; echo '== end'")
off_mod=$(section "$off" mod) off_bpf=$(section "$off" bpf)

echo "guard bench: with the guard (kthost trace attached)"
"$K" trace --vm "$STATE/vm/vm.json" -o "$STATE/trace" --pt none >"$STATE/trace.log" 2>&1 &
TRACE=$!
i=0
until "$K" exec --vm "$STATE/vm/vm.json" --timeout 20 -- cat /run/ktguest.stats 2>/dev/null | grep -q '"guard_open":1'; do
  i=$((i + 1)); [ $i -lt 120 ] || { cat "$STATE/trace.log"; exit 1; }; sleep 0.5
done
on=$(g "echo reset >/sys/module/ktguard/parameters/hold_hist; echo '== before'; cat /sys/module/ktguard/parameters/stats;
        echo '== mod'; ktprobe module-cycle $MOD; echo '== bpf'; ktprobe bpf-stress $BPF; echo '== tramp'; ktprobe bpf-stress $TRAMP;
        sleep 5; echo '== hist'; cat /sys/module/ktguard/parameters/hold_hist; echo '== after'; cat /sys/module/ktguard/parameters/stats; echo '== end'")
before=$(section "$on" before) on_mod=$(section "$on" mod) on_bpf=$(section "$on" bpf) on_tramp=$(section "$on" tramp)
hist=$(section "$on" hist) after=$(section "$on" after)
kill -TERM $TRACE; wait $TRACE || true; TRACE=""

stat() { echo "$1" | sed -n "s/^$2=//p"; }
field() { echo "$1" | sed -n "s/.*\"$2\":{\"median\":\([0-9.]*\),\"p99\":\([0-9.]*\),\"max\":\([0-9.]*\).*/\1 \2 \3/p"; }
secs() { echo "$1" | sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p'; }

holds=$(( $(stat "$after" acks) - $(stat "$before" acks) ))
missed=$(( $(stat "$after" timeouts) + $(stat "$after" reader_gone) + $(stat "$after" overflows) - $(stat "$before" timeouts) - $(stat "$before" reader_gone) - $(stat "$before" overflows) ))
# Percentiles from the histogram: "<bucket low us> <count>" lines; a bucket
# spans to the next bucket's low (16 per power of two, about 6%).
echo "$hist" | awk -v n="$holds" -v missed="$missed" '
  NF == 2 { low[++k] = $1; cnt[k] = $2; total += $2 }
  END {
    if (total == 0) { print "guard bench: no holds recorded"; exit 1 }
    split("50 99 100", ps, " ")
    for (j = 1; j <= 3; j++) {
      want = (ps[j] == 100) ? total : int(total * ps[j] / 100 + 0.999999)
      acc = 0
      for (i = 1; i <= k; i++) { acc += cnt[i]; if (acc >= want) break }
      hi = (i < k) ? low[i + 1] : low[i] * 1.0625
      v[j] = sprintf("%.2f-%.2f ms", low[i] / 1000, hi / 1000)
    }
    printf("hold durations over the stress: %d holds (acked %d, missed %d)\n", total, n, missed)
    printf("  median %s   p99 %s   max %s\n", v[1], v[2], v[3])
    printf("  target: median <= 2 ms, p99 <= 20 ms\n")
  }'

set -- $(field "$off_mod" unload_us); off_med=$1 off_p99=$2
set -- $(field "$on_mod" unload_us); on_med=$1 on_p99=$2
awk -v a="$off_med" -v b="$on_med" -v c="$off_p99" -v d="$on_p99" 'BEGIN {
  printf("module unload (delete_module, 50 cycles): median %.0f us without the guard, %.0f us with it: %.2fx; p99 %.0f -> %.0f us\n", a, b, b / a, c, d) }'
awk -v a="$(secs "$off_bpf")" -v b="$(secs "$on_bpf")" 'BEGIN {
  printf("BPF stress (1000 programs loaded and closed): %.2f s without the guard, %.2f s with it: %.2fx\n", a, b, b / a) }'
echo "fentry/fexit programs with the guard: $on_tramp"
echo "kthost trace: $(tail -n 1 "$STATE/trace.log")"
