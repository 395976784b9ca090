#!/bin/bash
# The snapshot and held-BPF checks on more Debian kernels than the default
# image's. The kernels are chosen now, from what the archive offers: the
# newest PREEMPT_RT ABI and the generic ABI before the default one (the
# default image, the newest generic ABI, runs every suite already, so one CI
# run covers three kernels). For each:
#   1. ktguard built against that kernel's headers (guest-kit/ktguard/build.sh --release);
#   2. an image with that kernel (vm-images/build-image.sh --kernel);
#   3. the guest boots it: uname -r must be that release;
#   4. GuestText.* (kthost's text equals the guest's /proc/kcore and its BPF
#      JIT bytes, both memory backends) and
#      UnloadRace.GuardSavesEveryUnloadedTextExactly (every unloaded BPF
#      program held and saved exactly; KTHOST_BPF_PROGRAMS of them, 300 here).
# Prints one line per kernel and exits 1 if any check failed.
#
# usage: tests/vm/run-kernels.sh BUILD_DIR [KERNEL...]
#   KERNEL: an ABI with its flavour (6.1.0-47-amd64, 6.1.0-50-rt-amd64); the
#   default is the two chosen above.
set -euo pipefail
BUILD=$(cd "${1:?usage: run-kernels.sh BUILD_DIR [KERNEL...]}" && pwd)
shift
SRC=$(cd "$(dirname "$0")/../.." && pwd)
K=$BUILD/host/cli/kthost
say() { echo "kernels: $*"; }

# The ABI a metapackage (linux-image-amd64, linux-image-rt-amd64) points at.
abi_of() { apt-cache depends "linux-image-$1" 2>/dev/null | sed -n "s/^ *Depends: linux-image-\(.*-$1\)\$/\1/p" | head -n1; }
if [ $# -eq 0 ]; then
  [ -n "$(abi_of amd64)" ] || apt-get update -qq
  default=$(abi_of amd64) rt=$(abi_of rt-amd64)
  [ -n "$default" ] && [ -n "$rt" ] || { say "the archive names no amd64 or rt-amd64 kernel"; exit 1; }
  # Generic ABIs the archive has, newest first; the first one below the default.
  older=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' | cut -d' ' -f1 |
    sed 's/^linux-image-//' | sort -rV | awk -v d="$default" '$0 != d { print; exit }')
  [ -n "$older" ] || { say "the archive has no generic ABI besides $default"; exit 1; }
  set -- "$older" "$rt"
  say "default image: $default; also checking $older and $rt"
fi

failed=0
results=()
for kernel in "$@"; do
  out=$BUILD/kernels/$kernel
  mkdir -p "$out"
  say "== $kernel"
  if ! "$SRC/guest-kit/ktguard/build.sh" "$out/ktguard" --release "$kernel" >"$out/ktguard.log" 2>&1; then
    tail -n 5 "$out/ktguard.log"
    results+=("$kernel: ktguard did not build (ktguard.log)"); failed=1; continue
  fi
  if ! "$SRC/vm-images/build-image.sh" "$out/image" --kernel "$kernel" --guest-kit "$BUILD/guest-kit" \
      --cache "$BUILD/vm-image-cache" --ktguard "$out/ktguard/ktguard.ko" >"$out/image.log" 2>&1; then
    tail -n 5 "$out/image.log"
    results+=("$kernel: the image did not build (image.log)"); failed=1; continue
  fi
  # The guest really runs this kernel. A second try when the first boot
  # printed nothing at all (seen once with the rt kernel under multi-threaded
  # TCG: no console output in 120 s; the next boot took 10 s); it is reported.
  state=$out/boot
  running="" note=""
  for try in 1 2; do
    rm -rf "$state"
    if "$SRC/vm-images/ktvm" start --image "$out/image" --state-dir "$state" --name "k-${kernel//./-}" --accel tcg \
        >"$out/boot.log" 2>&1; then
      running=$("$K" exec --vm "$state/vm.json" --timeout 30 -- uname -r 2>/dev/null || true)
      "$SRC/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true
      break
    fi
    [ -s "$state/console.log" ] && break  # it printed something: a real failure, no retry
    note=" (the first boot printed nothing in 120 s; the second booted)"
  done
  if [ "$running" != "$kernel" ]; then
    tail -n 5 "$out/boot.log"
    results+=("$kernel: the guest runs '$running', not $kernel"); failed=1; continue
  fi
  filter='GuestText.*:*/GuestText.*:UnloadRace.GuardSavesEveryUnloadedTextExactly'
  if KTHOST_IMAGE_DIR=$out/image KTHOST_BPF_PROGRAMS=300 \
      "$BUILD/tests/vm/kthost_vm_tests" --gtest_filter="$filter" >"$out/tests.log" 2>&1 &&
      ! grep -q '\[  SKIPPED \]' "$out/tests.log"; then
    results+=("$kernel: ok, $(grep -c '^\[       OK \]' "$out/tests.log") checks passed$note")
  else
    grep -E 'Failure|FAILED|SKIPPED|Expected|Which is' "$out/tests.log" | head -n 20 || true
    results+=("$kernel: FAILED (tests.log)"); failed=1
  fi
done
echo
for r in "${results[@]}"; do say "$r"; done
exit $failed
