#!/bin/sh
# The unload guard's own cost, apart from the cost of tracing, on one TCG
# guest. Four cases, each run RUNS times (default 3), in turn:
#   detached  no kthost attached: frees are not held at all
#   traced    kthost trace --no-guard: traced, frees not held (the baseline
#             for the guard's own cost)
#   channel   kthost trace --no-ack-word: holds end by the channel ack only
#   word      kthost trace, as by default: holds also end by the ack word
# Each run is one workload in the guest (kthost trace -- CMD for the traced
# cases, which starts once the guest's helper is ready): 30 module
# load/unload cycles (delete_module waits for its hold) and 500 BPF programs
# of 4 kinds loaded and closed. Per run: hold durations from ktguard's
# histogram (median, p99), the module unload's median, the BPF stress's wall
# time. Printed: min / median / max over the runs of each, and per-run ratios
# (min / median / max): the guard's own cost = word / traced, tracing's cost
# = traced / detached.
# Also per run: kthost's own part of each hold (copy, ack word, channel ack:
# host_us in holds.jsonl), median and p99.
# PT=software traces with the TCG PT plugin on (the guest starts with it), so
# the trace's main thread is busy draining PT while holds are answered on the
# reader thread; PT=none (the default) traces the sideband alone.
# Target (TCG, this machine): median hold <= 2 ms, p99 <= 20 ms.
# SPINS="0 300 3000" draws the trade-off curve instead: the traced baseline
# and the ack-word case once per word_spin_us value (the hold's poll of its
# ack word before it sleeps), so hold latency stands against the BPF
# stress's slowdown for each.
#
# usage: tests/bench/run-guard-bench.sh BUILD_DIR    (RUNS=N, PT=none|software, SPINS="US ...")
set -eu
BUILD=${1:?usage: run-guard-bench.sh BUILD_DIR}
RUNS=${RUNS:-3}
PT=${PT:-none}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
K=$BUILD/host/cli/kthost
STATE=$(mktemp -d /tmp/kthost-guard-bench-XXXXXX)
trap '"$SRC/vm-images/ktvm" stop --vm "$STATE/vm/vm.json" >/dev/null 2>&1 || true; rm -rf "$STATE"' EXIT
VM="$STATE/vm/vm.json"
g() { "$K" exec --vm "$VM" --timeout 900 -- "$@"; }

echo "guard bench: booting a TCG guest (2 vCPUs, 1 GiB), $RUNS runs of 4 cases, PT $PT"
case $PT in
  none) plugin="" ;;
  software) plugin="--plugin $BUILD/pt-plugin/ktpt.so,out=$STATE/pt,trigger=$STATE/pt-on"; mkdir -p "$STATE/pt" ;;
  *) echo "guard bench: PT must be none or software" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086
"$SRC/vm-images/ktvm" start --image "$BUILD/vm-image" --state-dir "$STATE/vm" --name guardbench --mem 1G --smp 2 \
  --accel tcg $plugin >/dev/null
g test -d /sys/module/ktguard || { echo "guard bench: the image has no ktguard" >&2; exit 1; }

P=/sys/module/ktguard/parameters
SPIN_DEFAULT=$(g cat $P/word_spin_us)
if [ -n "${SPINS:-}" ]; then
  CASES="traced"
  for us in $SPINS; do CASES="$CASES w$us"; done
else
  CASES="detached traced channel word"
fi
WORKLOAD="echo reset >$P/hold_hist; echo '== before'; cat $P/stats;
  echo '== mod'; ktprobe module-cycle --count 30 --module /lib/kthost-test/dummy.ko --name dummy;
  echo '== bpf'; ktprobe bpf-stress --count 500 --kinds socket,xdp,tracepoint,kprobe --out /tmp/b.txt;
  sleep 2; echo '== hist'; cat $P/hold_hist; echo '== after'; cat $P/stats; echo '== end'"

section() { echo "$1" | sed -n "/^== $2\$/,/^== /p" | sed '1d;/^== /d'; }
stat() { echo "$1" | sed -n "s/^$2=//p"; }
median_of() { echo "$1" | sed -n "s/.*\"$2\":{\"median\":\([0-9.]*\).*/\1/p"; }
secs() { echo "$1" | sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p'; }
# Median and p99 (µs, bucket lows: 16 buckets per power of two, ~6% wide)
# and the count, from ktguard's "<bucket low us> <count>" histogram.
hist_pct() {
  echo "$1" | awk 'NF == 2 { low[++k] = $1; cnt[k] = $2; total += $2 }
    END {
      if (total == 0) { print "- - 0"; exit }
      split("50 99", ps, " ")
      for (j = 1; j <= 2; j++) {
        want = int(total * ps[j] / 100 + 0.999999); acc = 0
        for (i = 1; i <= k; i++) { acc += cnt[i]; if (acc >= want) break }
        printf("%s ", low[i])
      }
      print total
    }'
}

RESULTS=$STATE/results
: >"$RESULTS"
# kthost's part of each hold (host_us in DIR/holds.jsonl): "median p99", or "- -".
host_part() {
  [ -f "$1/holds.jsonl" ] || { echo "- -"; return; }
  sed -n 's/.*"host_us":\([0-9.e+]*\).*/\1/p' "$1/holds.jsonl" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf("%.0f %.0f\n", v[int((NR + 1) / 2)], v[int(NR * 0.99 + 0.999)]); else print "- -" }'
}
# one CASE RUN: runs the workload, appends
# "case run hold_med hold_p99 holds missed unload_med bpf_s host_med host_p99".
one() {
  case $1 in
    detached) out=$(g "$WORKLOAD") ;;
    traced) out=$("$K" trace --vm "$VM" -o "$STATE/t-$1-$2" --pt "$PT" --no-guard -- "$WORKLOAD" 2>"$STATE/t-$1-$2.log") ;;
    channel) out=$("$K" trace --vm "$VM" -o "$STATE/t-$1-$2" --pt "$PT" --no-ack-word -- "$WORKLOAD" 2>"$STATE/t-$1-$2.log") ;;
    word) out=$("$K" trace --vm "$VM" -o "$STATE/t-$1-$2" --pt "$PT" -- "$WORKLOAD" 2>"$STATE/t-$1-$2.log") ;;
    w*) g "echo ${1#w} >$P/word_spin_us" &&
        out=$("$K" trace --vm "$VM" -o "$STATE/t-$1-$2" --pt "$PT" -- "$WORKLOAD" 2>"$STATE/t-$1-$2.log") &&
        g "echo $SPIN_DEFAULT >$P/word_spin_us" ;;
  esac || { echo "guard bench: $1 run $2 failed" >&2; cat "$STATE/t-$1-$2.log" >&2 2>/dev/null; exit 1; }
  before=$(section "$out" before) after=$(section "$out" after)
  missed=$(( $(stat "$after" timeouts) + $(stat "$after" reader_gone) + $(stat "$after" overflows) -
             $(stat "$before" timeouts) - $(stat "$before" reader_gone) - $(stat "$before" overflows) ))
  set -- "$1" "$2" $(hist_pct "$(section "$out" hist)")
  echo "$1 $2 $3 $4 $5 $missed $(median_of "$(section "$out" mod)" unload_us) $(secs "$(section "$out" bpf)") $(host_part "$STATE/t-$1-$2")" >>"$RESULTS"
  rm -rf "$STATE/t-$1-$2"  # bundles with PT are large
  tail -n 1 "$RESULTS" | awk '{ printf("  %-8s run %s: holds %s (missed %s), hold median %s us p99 %s us (kthost part %s / %s us), unload median %.0f us, BPF stress %.2f s\n", $1, $2, $5, $6, $3, $4, $9, $10, $7, $8) }'
}

run=1
while [ $run -le "$RUNS" ]; do
  for c in $CASES; do one $c $run; done
  run=$((run + 1))
done

echo
echo "over $RUNS runs: min / median / max"
CASES="$CASES" awk '
  function mmm(v, n, fmt,   i, j, t, med) {   # sorts v[1..n] as numbers; "min / median / max"
    for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    return sprintf(fmt " / " fmt " / " fmt, v[1], med, v[n])
  }
  function show(label, col, fmt,   c, i, n, v) {
    for (c = 1; c <= ncases; c++) {
      n = 0
      for (i = 1; i <= rows; i++) if (kind[i] == cases[c] && f[i, col] != "-") v[++n] = f[i, col] + 0
      if (n) printf("  %-26s %-8s %s\n", label, cases[c], mmm(v, n, fmt))
    }
  }
  function ratio(label, col, a, b,   r, i, n, v) {
    n = 0
    for (r = 1; r <= runs; r++) v[++n] = val[a, r, col] / val[b, r, col]
    printf("  %-44s %sx\n", label, mmm(v, n, "%.2f"))
  }
  BEGIN { ncases = split(ENVIRON["CASES"], cases, " "); curve = cases[2] ~ /^w/ }
  { rows++; kind[rows] = $1; for (i = 3; i <= 10; i++) { f[rows, i] = $i; val[$1, $2, i] = $i } if ($2 > runs) runs = $2 }
  END {
    show("hold median (us)", 3, "%d"); show("hold p99 (us)", 4, "%d"); show("holds", 5, "%d"); show("holds missed", 6, "%d")
    show("kthost part, median (us)", 9, "%d"); show("kthost part, p99 (us)", 10, "%d")
    show("module unload median (us)", 7, "%.0f"); show("BPF stress (s)", 8, "%.2f")
    print "ratios, per run, min / median / max:"
    if (curve) {
      for (c = 2; c <= ncases; c++)
        ratio("guard own cost, BPF stress (" cases[c] " / traced)", 8, cases[c], "traced")
      for (c = 2; c <= ncases; c++)
        ratio("guard own cost, unload (" cases[c] " / traced)", 7, cases[c], "traced")
      exit
    }
    ratio("guard own cost, unload (word / traced)", 7, "word", "traced")
    ratio("guard own cost, BPF stress (word / traced)", 8, "word", "traced")
    ratio("ack word vs channel only, hold median", 3, "word", "channel")
    ratio("ack word vs channel only, hold p99", 4, "word", "channel")
    ratio("tracing cost, unload (traced / detached)", 7, "traced", "detached")
    ratio("tracing cost, BPF stress (traced / detached)", 8, "traced", "detached")
  }' "$RESULTS"
[ -n "${SPINS:-}" ] && exit 0
awk '$1 == "word" { m[++n] = $3; p[n] = $4 } END {
  for (i = 1; i <= n; i++) { if (m[i] > mm) mm = m[i]; if (p[i] > pp) pp = p[i] }
  printf("target (the default, ack word; worst run): median <= 2 ms: %s, p99 <= 20 ms: %s\n", mm <= 2000 ? "met" : "MISSED", pp <= 20000 ? "met" : "MISSED") }' "$RESULTS"
