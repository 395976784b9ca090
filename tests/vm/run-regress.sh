#!/bin/bash
# CI regression tracing end to end (scripts/kthost-ci.sh), against truth that
# shares nothing with kthost:
#   1. injected regression: ktregress.ko built twice, differing only in its
#      loop count (LOOPS and 10 x LOOPS), in two images of the default kernel.
#      The diff must flag exactly ktregress_work (own instructions), with
#      exactly the count the module's own machine code gives: objdump of each
#      .ko, instructions before the loop + LOOPS x the loop body + after it,
#      times the workload's 20 calls; nothing else's own instructions
#      flagged; the inclusive counts of it and of every caller on its stacks
#      (the syscall path of the echo) flagged (other inclusive changes,
#      driven by the longer run, are printed). Exit status 1. The module's
#      loop runs 16 steps per branch so that the new side's run lasts only
#      ~5% longer: the kernel's time-driven work (the tick, load balancing)
#      grows with a run's length, and a 10x loop of 4-instruction iterations
#      made runs ~50% longer, enough to push load balancing over its margin.
#      The functions that came nearest their margins are printed.
#   2. the same image on both sides: no regression, exit status 0.
#   3. two real kernels (the generic ABI before the default one, from the
#      archive, against the default image): runs clean, exit status 0 or 1,
#      no run over the error or loss limits; the changed functions printed.
# And every output: junit.xml well-formed (xmllint) with counts that add up,
# the SVGs well-formed and rendered (rsvg-convert), summary.md's sections;
# and every traced run: kthost's own footprint (stacks through virtio_console,
# ktguard or a virtio interrupt) under 0.5% of its instructions in the median
# run of each side, and under 1% in every run (tests/tools/check-regression.py
# says why one run can spike).
#
# usage: tests/vm/run-regress.sh BUILD_DIR [WORK_DIR]
#   REGRESS_PARTS=1,2 runs those parts only (default: all three)
set -euo pipefail
BUILD=$(cd "${1:?usage: run-regress.sh BUILD_DIR [WORK_DIR]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=${2:-$BUILD/regress}
rm -rf "$W"
mkdir -p "$W"
say() { echo "regress: $*"; }
PARTS=${REGRESS_PARTS:-1,2,3}
part() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
LOOPS=600
release=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['kernel_release'])" "$BUILD/vm-image/manifest.json")
kdir=/usr/src/linux-headers-$release
[ -f "$kdir/Module.symvers" ] || apt-get install -y -q "linux-headers-$release" >/dev/null

ci() {  # ci NAME BASE NEW WORKLOAD: runs kthost-ci.sh, prints its summary, echoes its exit status
  local name=$1 status
  set +e
  "$SRC/scripts/kthost-ci.sh" --build "$BUILD" --base "$2" --new "$3" --workload "$4" --runs 3 --out "$W/$name" \
    >"$W/$name.md" 2>"$W/$name.log"
  status=$?
  set -e
  grep 'kthost-ci: time' "$W/$name.log" >&2 || true
  plugin_stats "$W/$name" >&2
  echo "$status"
}
plugin_stats() {  # DIR: what ktpt.so counted on each side that bends a trace (pt-plugin/README.md)
  local side f stuck flushes
  for side in base new; do
    stuck=0 flushes=0
    for f in "$1/$side"/pt/cpu*.stats; do
      [ -f "$f" ] || continue
      stuck=$((stuck + $(sed -n 's/^stale_int3_stuck=//p' "$f"))) flushes=$((flushes + $(sed -n 's/^code_flushes=//p' "$f")))
    done
    say "$side: ktpt.so saw a vCPU stuck on a stale INT3 $stuck times and flushed QEMU's code cache $flushes times"
  done
}
failed=0

if part 1 || part 2; then
say "ktregress.ko with $LOOPS and $((LOOPS * 10)) loops, and an image of $release with each"
for side in base:$LOOPS new:$((LOOPS * 10)); do
  name=${side%%:*} loops=${side#*:}
  "$SRC/tests/vm/ktregress/build.sh" "$W/$name-ko" "$loops" "$kdir" >"$W/$name-ko.log" 2>&1 ||
    { cat "$W/$name-ko.log"; exit 1; }
  "$SRC/vm-images/build-image.sh" "$W/$name-image" --guest-kit "$BUILD/guest-kit" --cache "$BUILD/vm-image-cache" \
    --ktguard "$BUILD/ktguard/ktguard.ko" --module "$W/$name-ko/ktregress.ko" >"$W/$name-image.log" 2>&1 ||
    { tail -n 5 "$W/$name-image.log"; exit 1; }
done
fi

if part 1; then
say "1. injected: kthost-ci.sh, base (LOOPS) against new (10 x LOOPS), 3 runs each"
status=$(ci injected "$W/base-image" "$W/new-image" "$SRC/tests/vm/ktregress/workload.sh")
sed -n '1,/## Coverage/p' "$W/injected.md"
python3 "$SRC/tests/tools/check-regression.py" injected "$W/injected" "$status" \
  "$W/base-ko/ktregress.ko:$LOOPS" "$W/new-ko/ktregress.ko:$((LOOPS * 10))" 20 || failed=1
fi

if part 2; then
say "2. the same image on both sides, 3 runs each"
status=$(ci same "$W/base-image" "$W/base-image" "$SRC/tests/vm/ktregress/workload.sh")
sed -n '1,/## Inclusive/p' "$W/same.md"
python3 "$SRC/tests/tools/check-regression.py" same "$W/same" "$status" || failed=1
fi

if part 3; then
say "3. two real kernels: the generic ABI before $release, against $release"
abi_of() { apt-cache depends "linux-image-$1" 2>/dev/null | sed -n "s/^ *Depends: linux-image-\(.*-$1\)\$/\1/p" | head -n1; }
[ -n "$(abi_of amd64)" ] || apt-get update -qq
older=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' | cut -d' ' -f1 |
  sed 's/^linux-image-//' | sort -rV | awk -v d="$release" '$0 != d { print; exit }')
[ -n "$older" ] || { say "the archive has no generic ABI besides $release"; exit 1; }
older_image=$BUILD/kernels/$older/image  # vm_Kernels builds it; kthost-ci.sh builds it otherwise
[ -f "$older_image/manifest.json" ] || older_image=$older
status=$(ci kernels "$older_image" "$BUILD/vm-image" "$SRC/tests/vm/ktregress/syscalls.sh")
sed -n '1,/## Inclusive/p' "$W/kernels.md"
python3 "$SRC/tests/tools/check-regression.py" kernels "$W/kernels" "$status" || failed=1
fi
[ $failed = 0 ] || { say "FAILED (see above)"; exit 1; }
say "all checks passed"
