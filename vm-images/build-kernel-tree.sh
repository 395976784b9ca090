#!/bin/bash
# Builds a real kernel build tree, as a CI job that builds kernels has one:
# Debian's kernel source (linux-source-6.1), tinyconfig plus
# kernel-tree/kthost-test.config (what the test image, ktguest, ktguard and
# the workloads need, and DWARF), built with the machine's gcc. The tree then
# holds arch/x86/boot/bzImage, vmlinux (with DWARF), System.map, .config,
# Module.symvers and the modules' .ko files: what
# `vm-images/build-image.sh --kernel-tree`, `guest-kit/ktguard/build.sh --kdir`
# and `kthost report --vmlinux` take.
#
# usage: build-kernel-tree.sh OUTDIR [--source TARBALL] [--jobs N]
#   --source TARBALL  the kernel source (default /usr/src/linux-source-6.1.tar.xz,
#                     from the linux-source-6.1 package)
#   --jobs N          parallel make jobs (default: the number of CPUs)
#
# Skipped when a stamp of the source, the fragment and this script matches.
set -euo pipefail
export LC_ALL=C

die() { echo "kernel-tree: error: $*" >&2; exit 1; }
say() { echo "kernel-tree: $*"; }

OUTDIR="" SOURCE=/usr/src/linux-source-6.1.tar.xz JOBS=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --source) SOURCE=${2:?--source needs a tarball}; shift 2 ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$OUTDIR" ] || die "more than one OUTDIR"; OUTDIR=$1; shift ;;
  esac
done
[ -n "$OUTDIR" ] || die "usage: build-kernel-tree.sh OUTDIR [--source TARBALL] [--jobs N]"
[ -f "$SOURCE" ] || die "no kernel source at $SOURCE (apt-get install linux-source-6.1; scripts/install-deps.sh does)"
for cmd in make gcc bc flex bison tar xz; do
  command -v "$cmd" >/dev/null || die "$cmd not found (scripts/install-deps.sh installs what this needs)"
done
HERE=$(cd "$(dirname "$0")" && pwd)
FRAGMENT=$HERE/kernel-tree/kthost-test.config

sha() { sha256sum "$1" | cut -d' ' -f1; }
STAMP_TEXT=$(
  echo "script $(sha "$0")"
  echo "fragment $(grep -E '^(CONFIG_|# CONFIG_)' "$FRAGMENT" | sha256sum | cut -d' ' -f1)"
  echo "source $(basename "$SOURCE") $(stat -c '%s %Y' "$SOURCE")"
)
if [ -f "$OUTDIR/.kthost-stamp" ] && [ "$(cat "$OUTDIR/.kthost-stamp")" = "$STAMP_TEXT" ] &&
   [ -f "$OUTDIR/arch/x86/boot/bzImage" ] && [ -f "$OUTDIR/vmlinux" ] && [ -f "$OUTDIR/Module.symvers" ]; then
  say "up to date: $OUTDIR ($(cat "$OUTDIR/include/config/kernel.release"))"
  exit 0
fi

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
t0=$(date +%s)
say "extracting $SOURCE"
tar -xf "$SOURCE" -C "$OUTDIR" --strip-components=1
# Fixed build metadata: the same source and config give the same tree.
export KBUILD_BUILD_TIMESTAMP="$(date -u -d @"$(stat -c %Y "$SOURCE")")" KBUILD_BUILD_USER=kthost KBUILD_BUILD_HOST=kthost
mk() { make -C "$OUTDIR" ARCH=x86_64 "$@"; }
say "configuring: tinyconfig + $(basename "$FRAGMENT")"
mk -s tinyconfig
(cd "$OUTDIR" && ./scripts/kconfig/merge_config.sh -m .config "$FRAGMENT" >/dev/null)
echo 'CONFIG_LOCALVERSION="-kthost-tree"' >>"$OUTDIR/.config"
mk -s olddefconfig
# Kconfig drops an option whose dependencies are not met: say which.
missing=""
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=*) grep -qx "$line" "$OUTDIR/.config" || missing="$missing ${line%%=*}" ;;
    "# CONFIG_"*" is not set")
      opt=${line#\# }; opt=${opt%% *}
      ! grep -q "^$opt=" "$OUTDIR/.config" || missing="$missing $opt(set)" ;;
  esac
done <"$FRAGMENT"
[ -z "$missing" ] || die "the kernel configuration lost:$missing (a dependency is not met; see $FRAGMENT)"
say "building bzImage, vmlinux and modules with $JOBS jobs"
if ! mk -j"$JOBS" bzImage modules >"$OUTDIR/kthost-build.log" 2>&1; then
  tail -n 30 "$OUTDIR/kthost-build.log" >&2
  die "the kernel build failed (log: $OUTDIR/kthost-build.log)"
fi
for f in arch/x86/boot/bzImage vmlinux System.map Module.symvers include/config/kernel.release; do
  [ -f "$OUTDIR/$f" ] || die "the build left no $f"
done
echo "$STAMP_TEXT" >"$OUTDIR/.kthost-stamp"
say "built $(cat "$OUTDIR/include/config/kernel.release") in $(( $(date +%s) - t0 )) s: $OUTDIR"
