#!/bin/bash
# Builds ktstale.ko against a kernel build tree: build.sh OUTDIR KDIR
set -euo pipefail
out=${1:?usage: build.sh OUTDIR KDIR} kdir=${2:?KDIR}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$kdir/Module.symvers" ] || { echo "ktstale: $kdir is not a kernel build tree" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ktstale.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/ktstale.c" "$here/Kbuild" "$work/"
make -s -C "$kdir" M="$work" modules >&2
mkdir -p "$out"
objcopy --strip-debug "$work/ktstale.ko" "$out/ktstale.ko"
echo "ktstale: built $out/ktstale.ko"
