#!/bin/bash
# Builds ktregress.ko with a given loop count against a kernel build tree:
#   build.sh OUTDIR LOOPS KDIR
# Two builds that differ only in LOOPS give an injected regression whose
# size is known exactly (tests/vm/run-regress.sh).
set -euo pipefail
out=${1:?usage: build.sh OUTDIR LOOPS KDIR} loops=${2:?LOOPS} kdir=${3:?KDIR}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$kdir/Module.symvers" ] || { echo "ktregress: $kdir is not a kernel build tree" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ktregress.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/ktregress.c" "$here/Kbuild" "$work/"
make -s -C "$kdir" M="$work" KTREGRESS_LOOPS="$loops" modules >&2
mkdir -p "$out"
objcopy --strip-debug "$work/ktregress.ko" "$out/ktregress.ko"
echo "ktregress: built $out/ktregress.ko with $loops loops"
