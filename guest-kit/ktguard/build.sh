#!/bin/bash
# Builds ktguard.ko for the test image's kernel:
#   OUTDIR/ktguard.ko
#
# usage: build.sh OUTDIR [--kdir DIR | --release RELEASE]
#   --kdir DIR         a kernel build tree to use instead of the Debian headers
#   --release RELEASE  a Debian kernel's headers (6.1.0-47-amd64,
#                      6.1.0-50-rt-amd64): linux-headers-RELEASE, installed
#                      with apt-get when missing
#
# The kernel ABI is resolved like vm-images/build-image.sh does it, from
# linux-image-amd64, and linux-headers-<abi>-amd64 is installed with apt-get
# when it is missing (root needed then). The sources are built in a scratch
# copy, so the source tree stays clean.
set -euo pipefail
export LC_ALL=C

die() { echo "ktguard: error: $*" >&2; exit 1; }
say() { echo "ktguard: $*"; }

OUTDIR="" KDIR="" RELEASE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kdir) KDIR=${2:?--kdir needs a directory}; shift 2 ;;
    --release) RELEASE=${2:?--release needs a kernel release}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$OUTDIR" ] || die "more than one OUTDIR"; OUTDIR=$1; shift ;;
  esac
done
[ -n "$OUTDIR" ] || die "usage: build.sh OUTDIR [--kdir DIR]"
HERE=$(cd "$(dirname "$0")" && pwd)

resolve_abi() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*\)-amd64$/\1/p' | head -n1
}

if [ -z "$KDIR" ] && [ -n "$RELEASE" ]; then
  KDIR=/usr/src/linux-headers-$RELEASE
  if [ ! -f "$KDIR/Module.symvers" ]; then
    say "installing linux-headers-$RELEASE"
    apt-get install -y -q "linux-headers-$RELEASE" >&2 ||
      { apt-get update -qq && apt-get install -y -q "linux-headers-$RELEASE" >&2; } ||
      die "cannot install linux-headers-$RELEASE: ktguard cannot be built for this kernel (the image can still be traced, best effort)"
  fi
elif [ -z "$KDIR" ]; then
  ABI=$(resolve_abi)
  if [ -z "$ABI" ]; then
    say "linux-image-amd64 unknown to apt; running apt-get update"
    apt-get update -qq || die "apt-get update failed"
    ABI=$(resolve_abi)
  fi
  [ -n "$ABI" ] || die "cannot resolve the kernel ABI from linux-image-amd64"
  KDIR=/usr/src/linux-headers-$ABI-amd64
  if [ ! -f "$KDIR/Module.symvers" ]; then
    say "installing linux-headers-$ABI-amd64"
    apt-get install -y -q "linux-headers-$ABI-amd64" >&2 ||
      { apt-get update -qq && apt-get install -y -q "linux-headers-$ABI-amd64" >&2; } ||
      die "cannot install linux-headers-$ABI-amd64"
  fi
fi
[ -f "$KDIR/Module.symvers" ] || die "$KDIR is not a kernel build tree (no Module.symvers)"

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ktguard-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/Kbuild "$HERE"/*.c "$HERE"/*.h "$HERE"/../include/kthost_shared.h "$WORK/"
say "building against $KDIR"
make -s -C "$KDIR" M="$WORK" modules >&2 || die "module build failed"
# Debug info is 3/4 of the file and the guest never needs it.
objcopy --strip-debug "$WORK/ktguard.ko" "$WORK/ktguard.stripped.ko"
install -m 644 "$WORK/ktguard.stripped.ko" "$OUTDIR/ktguard.ko"
say "built $OUTDIR/ktguard.ko ($(sed -n 's/^vermagic=//p' <(tr '\0' '\n' <"$OUTDIR/ktguard.ko")))"
