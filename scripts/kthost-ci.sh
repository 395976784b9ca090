#!/bin/bash
# kthost-ci.sh: did the kernel regress? Runs one workload script on two
# kernels, traces it several times on each, and compares the two sets of runs
# with kthost diff's noise model. Everything goes into one directory:
#
#   OUT/base/, OUT/new/   the image (when built here), boot log, and per run
#                         run-N/ (the bundle), run-N.json (kthost report
#                         --json), run-N.folded (call stacks), run-N.log
#   OUT/diff/             summary.md, junit.xml, regression.json, base.svg,
#                         new.svg, diff.svg (kthost diff --out)
#   OUT/timings.json      wall seconds of every step, per kernel and run
#
# usage: scripts/kthost-ci.sh --base KERNEL --new KERNEL --workload FILE
#                             [--runs N] [--out DIR] [--build DIR] [--smp N]
#                             [--mem SIZE] [--module KO]... [-- DIFF-OPTION...]
#   KERNEL  a built image directory (vm-images/build-image.sh OUTDIR), a
#           Debian kernel by flavour or ABI (amd64, 6.1.0-47-amd64,
#           6.1.0-50-rt-amd64), a local linux-image .deb, or a kernel build
#           tree (a directory with arch/x86/boot/bzImage); images are built
#           here with ktguard for that kernel
#   --workload FILE  a shell script run in the guest (busybox sh) as root
#   --runs N         traced runs per kernel (default 3), after one untimed
#                    warm-up run that is not traced
#   --module KO      an extra module put in both built images (/lib/kthost-test/)
#   DIFF-OPTION      passed to kthost diff (--threshold, --watch, ...)
#
# Each kernel boots once, under TCG with the software PT plugin (hardware PT
# under KVM is not used by this script yet). Exit status:
# kthost diff's: 0 no regression, 1 regression, 2 error (including a run over
# the decode-error or loss limits, or a step that failed).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$SRC/build BASE="" NEW="" WORKLOAD="" RUNS=3 OUT="" SMP=2 MEM=1G
MODULES=() DIFF_ARGS=()
die() { echo "kthost-ci: error: $*" >&2; exit 2; }
say() { echo "kthost-ci: $*" >&2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE=${2:?--base needs a kernel}; shift 2 ;;
    --new) NEW=${2:?--new needs a kernel}; shift 2 ;;
    --workload) WORKLOAD=${2:?--workload needs a file}; shift 2 ;;
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --build) BUILD=${2:?--build needs a directory}; shift 2 ;;
    --smp) SMP=${2:?--smp needs a number}; shift 2 ;;
    --mem) MEM=${2:?--mem needs a size}; shift 2 ;;
    --module) MODULES+=("${2:?--module needs a .ko file}"); shift 2 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    --) shift; DIFF_ARGS=("$@"); break ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[ -n "$BASE" ] && [ -n "$NEW" ] && [ -n "$WORKLOAD" ] || die "--base, --new and --workload are required (see --help)"
[ -f "$WORKLOAD" ] || die "--workload $WORKLOAD: no such file"
case "$RUNS" in ''|*[!0-9]*) die "--runs wants a number" ;; esac
[ "$RUNS" -ge 1 ] || die "--runs must be at least 1"
K=$BUILD/host/cli/kthost
[ -x "$K" ] || die "$K not built (run scripts/build.sh)"
[ -f "$BUILD/pt-plugin/ktpt.so" ] || die "$BUILD/pt-plugin/ktpt.so not built"
OUT=${OUT:-kthost-ci-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SCRIPT=$(cat "$WORKLOAD")
TIMES=$OUT/timings.tsv
: >"$TIMES"
now() { date +%s.%N; }
record() { echo "$1	$2	$3	$(awk -v a="$4" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')" >>"$TIMES"; }
VM="" STATE=""
stop_vm() { [ -z "$VM" ] || "$SRC/vm-images/ktvm" stop --vm "$VM" >/dev/null 2>&1 || true; VM=""; }
trap stop_vm EXIT INT TERM

# An image directory for KERNEL, built under DIR unless KERNEL is one.
image_for() {
  local kernel=$1 dir=$2 spec release kdir
  if [ -d "$kernel" ] && [ -f "$kernel/vmlinuz" ] && [ -f "$kernel/manifest.json" ]; then
    [ ${#MODULES[@]} -eq 0 ] || say "$kernel is a built image: --module is not added to it"
    echo "$kernel"; return
  fi
  mkdir -p "$dir"
  if [ -d "$kernel" ]; then
    [ -f "$kernel/arch/x86/boot/bzImage" ] || die "$kernel is neither an image nor a kernel build tree"
    spec=(--kernel-tree "$kernel"); kdir=(--kdir "$kernel")
  elif [ -f "$kernel" ]; then
    spec=(--kernel "$kernel")
    release=$(dpkg-deb -f "$kernel" Package | sed 's/^linux-image-//')
    kdir=(--release "${release%-unsigned}")
  else
    spec=(--kernel "$kernel")
    case "$kernel" in
      [0-9]*) release=$kernel ;;
      *) release=$(apt-cache depends "linux-image-$kernel" 2>/dev/null |
           sed -n "s/^ *Depends: linux-image-\(.*-$kernel\)\$/\1/p" | head -n1) ;;
    esac
    [ -n "$release" ] || die "no Debian kernel '$kernel' (apt-get update?)"
    kdir=(--release "$release")
  fi
  local guard=()
  if "$SRC/guest-kit/ktguard/build.sh" "$dir/ktguard" "${kdir[@]}" >"$dir/ktguard.log" 2>&1; then
    guard=(--ktguard "$dir/ktguard/ktguard.ko")
  else
    say "ktguard did not build for $kernel ($dir/ktguard.log): traced best effort"
  fi
  local mods=()
  for m in ${MODULES[@]+"${MODULES[@]}"}; do mods+=(--module "$m"); done
  "$SRC/vm-images/build-image.sh" "$dir/image" "${spec[@]}" --guest-kit "$BUILD/guest-kit" \
    --cache "$BUILD/vm-image-cache" ${guard[@]+"${guard[@]}"} ${mods[@]+"${mods[@]}"} >"$dir/image.log" 2>&1 ||
    { tail -n 5 "$dir/image.log" >&2; die "the image for $kernel did not build ($dir/image.log)"; }
  echo "$dir/image"
}

# Boots SIDE's image, runs the workload once untraced, then RUNS traced runs.
run_side() {
  local side=$1 kernel=$2 dir=$OUT/$1 t image release
  mkdir -p "$dir"
  say "$side: $kernel"
  t=$(now)
  image=$(image_for "$kernel" "$dir")
  record "$side" image - "$t"
  STATE=$dir/vm
  rm -rf "$STATE" "$dir/pt"
  t=$(now)
  "$SRC/vm-images/ktvm" start --image "$image" --state-dir "$STATE" --name "ci-$side" --accel tcg --smp "$SMP" --mem "$MEM" \
    --plugin "$BUILD/pt-plugin/ktpt.so,out=$dir/pt,trigger=$dir/pt-on" >"$dir/boot.log" 2>&1 ||
    { tail -n 5 "$dir/boot.log" >&2; die "$side: the guest did not boot ($dir/boot.log)"; }
  VM=$STATE/vm.json
  record "$side" boot - "$t"
  release=$("$K" exec --vm "$VM" --timeout 60 -- uname -r)
  say "$side: booted $release; warm-up run (untraced)"
  t=$(now)
  "$K" exec --vm "$VM" --timeout 3600 -- "$SCRIPT" >"$dir/warmup.log" 2>&1 ||
    { tail -n 5 "$dir/warmup.log" >&2; die "$side: the workload failed untraced ($dir/warmup.log)"; }
  record "$side" workload-untraced 0 "$t"
  # Modules the workload loaded make the guest's symbol cache stale; it is
  # read again only while no host listens (reading it while tracing would
  # be traced). Wait for it, so the runs name the new modules' functions.
  # ktguest notices module changes within a second and writes its stats
  # every second: wait for that first.
  local fresh=""
  sleep 3
  for _ in $(seq 1 90); do
    case "$("$K" exec --vm "$VM" --timeout 10 -- cat /run/ktguest.stats 2>/dev/null || true)" in
      *'"symbols_stale":0'*) fresh=1; break ;;
    esac
    sleep 1
  done
  [ -n "$fresh" ] || say "$side: the guest's symbol cache is still stale after 90 s: new modules' functions go unnamed"
  # A first connection collects what the guest lost while no host listened
  # (frees at boot): it belongs to no run.
  "$K" trace --vm "$VM" --pt none -o "$dir/connect" -- true >/dev/null 2>&1 || true
  for i in $(seq 1 "$RUNS"); do
    say "$side: run $i/$RUNS"
    t=$(now)
    "$K" trace --vm "$VM" -o "$dir/run-$i" -- "$SCRIPT" >"$dir/run-$i.out" 2>"$dir/run-$i.log" ||
      { tail -n 5 "$dir/run-$i.log" >&2; die "$side: traced run $i failed ($dir/run-$i.log)"; }
    record "$side" trace "$i" "$t"
    t=$(now)
    "$K" report "$dir/run-$i" --json --top 1000000 --quiet --folded "$dir/run-$i.folded" >"$dir/run-$i.json" ||
      die "$side: kthost report of run $i failed"
    record "$side" report "$i" "$t"
  done
  echo "$release" >"$dir/release"
  stop_vm
}

run_side base "$BASE"
run_side new "$NEW"
list() { local out="" i; for i in $(seq 1 "$RUNS"); do out=$out${out:+,}$OUT/$1/run-$i.json; done; echo "$out"; }
say "kthost diff: $RUNS runs of $(cat "$OUT/base/release") against $RUNS of $(cat "$OUT/new/release")"
t=$(now)
set +e
"$K" diff "$(list base)" "$(list new)" --quiet --out "$OUT/diff" \
  --base-label "$BASE ($(cat "$OUT/base/release"))" --new-label "$NEW ($(cat "$OUT/new/release"))" \
  ${DIFF_ARGS[@]+"${DIFF_ARGS[@]}"} >"$OUT/diff.md"
status=$?
set -e
record all diff - "$t"
python3 - "$TIMES" "$OUT/timings.json" <<'EOF'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
json.dump([{"side": s, "step": st, "run": r, "seconds": float(x)} for s, st, r, x in rows],
          open(sys.argv[2], "w"), indent=1)
for s, st, r, x in rows:
    print(f"kthost-ci: time {s:5} {st:17} {r:>2} {float(x):9.2f} s", file=sys.stderr)
EOF
cat "$OUT/diff.md"
say "verdict: exit $status (0 no regression, 1 regression, 2 error); outputs in $OUT/diff"
exit $status
