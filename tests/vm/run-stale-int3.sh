#!/bin/bash
# A guest stuck on a stale INT3 translation is let go by ktpt.so.
#
# Under multi-threaded TCG a cross-modifying-code race can leave a vCPU with a
# translation of an INT3 that text_poke has since removed from memory; the
# kernel's int3 path retries the address, and the vCPU traps on the stale
# translation for ever (pt-plugin/stale_int3.h). The race cannot be forced,
# so this test makes the same state by writing the guest's RAM file behind
# QEMU's back, with the test module ktstale.ko (tests/vm/ktstale/ktstale.c):
#   1. an INT3 over ktstale_target's first byte, before it ever ran;
#   2. a call of it (`run`), which traps; the module's die notifier sends the
#      CPU back to the INT3 (`hits` grows), and TCG translates it;
#   3. 3 s later, the original byte put back. Memory and TCG now disagree, and only the
#      kernel retries.
# Checks: the call returns (`done` = 1) and the guest goes on; the plugin's
# stats count the stuck vCPU and the code-cache flush. Tracing is off
# (no trigger): the watch runs whether or not a trace is on.
#
#   tests/vm/run-stale-int3.sh BUILD_DIR [WORK_DIR]
set -euo pipefail
BUILD=$(cd "${1:?usage: run-stale-int3.sh BUILD_DIR [WORK_DIR]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=${2:-$BUILD/stale-int3}
K=$BUILD/host/cli/kthost
say() { echo "stale-int3: $*"; }
fail() { say "FAIL  $*"; exit 1; }
rm -rf "$W"
mkdir -p "$W"
release=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['kernel_release'])" "$BUILD/vm-image/manifest.json")
kdir=/usr/src/linux-headers-$release
[ -f "$kdir/Module.symvers" ] || apt-get install -y -q "linux-headers-$release" >/dev/null
"$SRC/tests/vm/ktstale/build.sh" "$W/ko" "$kdir" >"$W/ko.log" 2>&1 || { cat "$W/ko.log"; exit 1; }
"$SRC/vm-images/build-image.sh" "$W/image" --guest-kit "$BUILD/guest-kit" --cache "$BUILD/vm-image-cache" \
  --ktguard "$BUILD/ktguard/ktguard.ko" --module "$W/ko/ktstale.ko" >"$W/image.log" 2>&1 ||
  { tail -n 5 "$W/image.log"; exit 1; }

state=$W/vm
stop_vm() { [ -f "$state/vm.json" ] && "$SRC/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true; }
trap stop_vm EXIT INT TERM
"$SRC/vm-images/ktvm" start --image "$W/image" --state-dir "$state" --smp 2 --accel tcg --boot-timeout 300 \
  --plugin "$BUILD/pt-plugin/ktpt.so,out=$W/pt,trigger=$W/pt-on" >/dev/null
gx() { "$K" exec --vm "$state/vm.json" --timeout "${T:-30}" -- "$1"; }
param() { gx "cat /sys/module/ktstale/parameters/$1"; }
ram=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ram']['path'])" "$state/vm.json")
[ -f "$ram" ] || fail "the guest's RAM file is not at '$ram'"

gx "insmod /lib/kthost-test/ktstale.ko"
read -r virt phys byte <<<"$(param where)"
say "ktstale_target at $virt (guest physical $phys), first byte $byte"
[ "$byte" != cc ] || fail "the target already starts with an INT3"
poke() {  # BYTE: written at the target's guest physical address, straight into the RAM file
  python3 - "$ram" "$phys" "$1" <<'PY'
import sys
path, phys, byte = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16)
with open(path, "r+b") as f:
    f.seek(phys)
    f.write(bytes([byte]))
PY
}
poke cc
gx "(echo 1 >/sys/module/ktstale/parameters/run) </dev/null >/dev/null 2>&1 &"
# The vCPU that makes the call now spins on the INT3 (the guest may not
# answer meanwhile: the spinning task holds its CPU), and TCG translates it.
sleep 3
say "putting $byte back behind QEMU's back: memory and TCG's translation now disagree"
poke "$byte"
done_calls=0
for _ in $(seq 1 6); do
  done_calls=$(T=20 param done || true)
  [ "$done_calls" = 1 ] && break
  sleep 1
done
[ "$done_calls" = 1 ] || fail "the call did not return in 2 minutes: the guest is stuck (the vCPU runs the stale INT3)"
hits=$(param hits)
[ "$hits" -gt 0 ] || fail "the call never trapped on the INT3 (hits 0)"
say "ok    the call returned after $hits hits of the INT3"
T=60 gx "rmmod ktstale && echo guest alive" | grep -q "guest alive" || fail "the guest does not answer after the call"
stop_vm
trap - EXIT INT TERM
stuck=0 flushes=0
for f in "$W"/pt/cpu*.stats; do
  stuck=$((stuck + $(sed -n 's/^stale_int3_stuck=//p' "$f")))
  flushes=$((flushes + $(sed -n 's/^code_flushes=//p' "$f")))
done
say "plugin stats: stuck on a stale INT3 $stuck times, code cache flushed $flushes times"
[ "$stuck" -ge 1 ] && [ "$flushes" -ge 1 ] || fail "the plugin did not count the stuck vCPU and its flush"
say "ok    the plugin flushed its code cache and the guest went on"
