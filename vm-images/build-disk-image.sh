#!/bin/bash
# Builds a bootable Debian 12 disk image with systemd, from Debian packages
# only, with the guest kit installed from its own Debian packages:
#   OUTDIR/disk.qcow2      MBR, one ext4 partition, GRUB, the kernel, systemd
#   OUTDIR/manifest.json   kernel, staged kernel, guest-kit version, packages
#
# usage: build-disk-image.sh OUTDIR --debs DIR [--kernel SPEC] [--stage-kernel SPEC]
#                            [--size GIB] [--cache DIR]
#   --debs DIR          ktguest, ktguard-dkms and kthost-test-agent .debs
#                       (guest-kit/debian/build-debs.sh)
#   --kernel SPEC       the image's kernel: a flavour (amd64: its newest ABI)
#                       or an ABI (6.1.0-56-amd64). Default amd64. Its headers
#                       are installed too, so DKMS builds ktguard for it.
#   --stage-kernel SPEC another kernel's image and headers packages, put in
#                       /var/lib/kthost/kernels/ for a kernel upgrade inside
#                       the guest with no network (dpkg -i them, reboot)
#   --size GIB          the disk's size (sparse), default 6
#   --cache DIR         downloaded .debs, kept across builds
#                       (default /var/cache/kthost/disk-image-debs)
#
# How: mmdebstrap makes the root tree (apt variant, no recommends) with
# systemd-sysv, udev, the kernel and its headers, dkms, grub-pc and the local
# .debs; DKMS builds ktguard while the packages install. mke2fs -d writes the
# tree into the partition of a raw disk without mounting anything. One boot of
# the image's own kernel, with disk-image-setup as init, runs grub-install and
# update-grub on the guest's real disk and powers off. Then qemu-img makes the
# qcow2. The build is skipped when a stamp of all inputs matches.
set -euo pipefail
umask 022
export LC_ALL=C
die() { echo "disk-image: error: $*" >&2; exit 1; }
say() { echo "disk-image: $*"; }

OUTDIR="" DEBS="" KERNEL=amd64 STAGE="" SIZE=6 CACHE=/var/cache/kthost/disk-image-debs
while [ $# -gt 0 ]; do
  case "$1" in
    --debs) DEBS=${2:?--debs needs a directory}; shift 2 ;;
    --kernel) KERNEL=${2:?--kernel needs a flavour or an ABI}; shift 2 ;;
    --stage-kernel) STAGE=${2:?--stage-kernel needs a flavour or an ABI}; shift 2 ;;
    --size) SIZE=${2:?--size needs GiB}; shift 2 ;;
    --cache) CACHE=${2:?--cache needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$OUTDIR" ] || die "more than one OUTDIR"; OUTDIR=$1; shift ;;
  esac
done
[ -n "$OUTDIR" ] && [ -n "$DEBS" ] || die "usage: build-disk-image.sh OUTDIR --debs DIR [--kernel SPEC] [--stage-kernel SPEC]"
case "$SIZE" in ''|*[!0-9]*) die "--size takes whole GiB" ;; esac
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap's root mode, mke2fs of a root tree)"
for cmd in mmdebstrap mke2fs sfdisk qemu-img qemu-system-x86_64 apt-cache apt-get dpkg-deb sha256sum; do
  command -v "$cmd" >/dev/null || die "$cmd not found (scripts/install-deps.sh)"
done
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=kernel-spec.sh
. "$HERE/kernel-spec.sh"
DEBS=$(cd "$DEBS" && pwd) || die "--debs $DEBS: no such directory"
LOCAL_DEBS=()
for pkg in ktguest ktguard-dkms kthost-test-agent; do
  f=$(ls "$DEBS"/${pkg}_*.deb 2>/dev/null | sort -V | tail -n1)
  [ -n "$f" ] || die "no ${pkg}_*.deb in $DEBS (guest-kit/debian/build-debs.sh $DEBS)"
  LOCAL_DEBS+=("$f")
done
mkdir -p "$OUTDIR" "$CACHE"
OUTDIR=$(cd "$OUTDIR" && pwd) CACHE=$(cd "$CACHE" && pwd)

abi_for() {  # SPEC -> 6.1.0-56-amd64
  local pkg
  pkg=$(resolve_kernel_package "$1")
  if [ -z "$pkg" ]; then
    apt-get update -qq || die "apt-get update failed"
    pkg=$(resolve_kernel_package "$1")
  fi
  [ -n "$pkg" ] || die "the archive has no kernel '$1'"
  echo "${pkg#linux-image-}"
}
ABI=$(abi_for "$KERNEL")
STAGE_ABI=""
[ -z "$STAGE" ] || STAGE_ABI=$(abi_for "$STAGE")
[ "$STAGE_ABI" != "$ABI" ] || die "--stage-kernel $STAGE is the image's own kernel $ABI"
say "kernel $ABI${STAGE_ABI:+, staged for an upgrade: $STAGE_ABI}"

# The host's own apt sources, so the image gets the same archive (and its
# security updates) that the rest of the build uses.
SOURCES=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && grep -q '^[^#]' "$f" && SOURCES+=("$f")
done
[ ${#SOURCES[@]} -gt 0 ] || die "the host has no apt sources"

STAMP_TEXT=$(
  echo "script $(sha256sum "$0" | cut -d' ' -f1)"
  echo "setup $(sha256sum "$HERE/disk-image-setup" | cut -d' ' -f1)"
  for f in "${LOCAL_DEBS[@]}"; do echo "deb $(basename "$f") $(sha256sum "$f" | cut -d' ' -f1)"; done
  echo "kernel $ABI $(candidate_versions "linux-image-$ABI")"
  echo "stage ${STAGE_ABI:-none}"
  echo "size $SIZE"
)
if [ -f "$OUTDIR/.stamp" ] && [ "$(cat "$OUTDIR/.stamp")" = "$STAMP_TEXT" ] && [ -f "$OUTDIR/disk.qcow2" ]; then
  say "up to date: $OUTDIR/disk.qcow2"
  exit 0
fi
rm -f "$OUTDIR/.stamp" "$OUTDIR/disk.qcow2"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kthost-disk-image.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root
PACKAGES="systemd-sysv udev kmod procps e2fsprogs initramfs-tools grub-pc dkms linux-image-$ABI linux-headers-$ABI"
INCLUDES=(--include="$PACKAGES")
# apt installs a local .deb by its path inside the chroot: the same path
# there as here, removed again before the tree is written out.
mkdir -p "$WORK/debs"
for f in "${LOCAL_DEBS[@]}"; do
  cp "$f" "$WORK/debs/"
  INCLUDES+=(--include="$WORK/debs/$(basename "$f")")
done
say "mmdebstrap: $PACKAGES and $(for f in "${LOCAL_DEBS[@]}"; do basename "$f"; done | tr '\n' ' ')"
start=$(date +%s)
# The customize hooks: what a Debian installer would write for this disk,
# and two settings that make package installs inside the TCG guest (the
# kernel upgrade) take minutes, not tens of minutes: dpkg without an fsync per
# file (a test image: a crash mid-install is simply rebuilt), and an initramfs
# with only the modules this machine needs.
if ! mmdebstrap --mode=root --variant=apt --format=directory "${INCLUDES[@]}" \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --skip=download/empty --skip=essential/unlink \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in $CACHE /var/cache/apt/archives/" \
    --setup-hook="mkdir -p \"\$1$WORK\" && cp -a $WORK/debs \"\$1$WORK/\"" \
    --customize-hook="rm -rf \"\$1$WORK\"" \
    --customize-hook="sync-out /var/cache/apt/archives $CACHE" \
    --customize-hook='echo kthost-disk >"$1/etc/hostname"' \
    --customize-hook='printf "/dev/vda1 / ext4 errors=remount-ro 0 1\n" >"$1/etc/fstab"' \
    --customize-hook='printf "GRUB_DEFAULT=0\nGRUB_TIMEOUT=0\nGRUB_DISTRIBUTOR=Debian\nGRUB_CMDLINE_LINUX_DEFAULT=\"\"\nGRUB_CMDLINE_LINUX=\"console=ttyS0 tsc=reliable\"\nGRUB_DISABLE_OS_PROBER=true\nGRUB_TERMINAL=console\n" >"$1/etc/default/grub"' \
    --customize-hook='passwd --root "$1" -d root >/dev/null' \
    --customize-hook='echo force-unsafe-io >"$1/etc/dpkg/dpkg.cfg.d/kthost-unsafe-io"' \
    --customize-hook='sed -i "s/^MODULES=.*/MODULES=dep/" "$1/etc/initramfs-tools/initramfs.conf"' \
    --customize-hook="copy-in $HERE/disk-image-setup /usr/local/sbin/" \
    --customize-hook='mv "$1/usr/local/sbin/disk-image-setup" "$1/usr/local/sbin/kthost-image-setup"' \
    bookworm "$ROOT" "${SOURCES[@]}" >"$WORK/mmdebstrap.log" 2>&1; then
  tail -40 "$WORK/mmdebstrap.log" >&2
  die "mmdebstrap failed (log above)"
fi
say "root tree in $(( $(date +%s) - start )) s ($(du -sm "$ROOT" | cut -f1) MiB)"
[ -f "$ROOT/boot/vmlinuz-$ABI" ] && [ -f "$ROOT/boot/initrd.img-$ABI" ] || die "no kernel or initrd for $ABI in the root tree"
ko=$(ls "$ROOT/lib/modules/$ABI/updates/dkms/ktguard.ko"* 2>/dev/null | head -n1)
[ -n "$ko" ] || { grep -i -A5 dkms "$WORK/mmdebstrap.log" | tail -30 >&2; die "DKMS did not build ktguard for $ABI while the packages installed"; }
say "DKMS built ktguard for $ABI"

if [ -n "$STAGE_ABI" ]; then
  mkdir -p "$ROOT/var/lib/kthost/kernels"
  common=$(apt-cache depends "linux-headers-$STAGE_ABI" | sed -n 's/^ *Depends: \(linux-headers-[^ ]*-common[^ ]*\)$/\1/p' | head -n1)
  for pkg in "linux-image-$STAGE_ABI" "linux-headers-$STAGE_ABI" ${common:+"$common"}; do
    ver=$(candidate_versions "$pkg" | awk '{ print $2 }')
    [ -n "$ver" ] || die "no candidate version of $pkg"
    f=""
    for c in "$CACHE/${pkg}_"*.deb; do
      [ -f "$c" ] && [ "$(dpkg-deb -f "$c" Version)" = "$ver" ] && f=$c
    done
    if [ -z "$f" ]; then
      say "downloading $pkg=$ver"
      (cd "$WORK" && apt-get download -q "$pkg=$ver" >/dev/null) || die "apt-get download $pkg=$ver failed"
      f=$(echo "$WORK/${pkg}_"*.deb)
      [ -f "$f" ] || die "apt-get download $pkg=$ver wrote no .deb"
      cp "$f" "$CACHE/"
    fi
    cp "$f" "$ROOT/var/lib/kthost/kernels/"
  done
  say "staged $(ls "$ROOT/var/lib/kthost/kernels" | tr '\n' ' ')"
fi

# The disk: an MBR with one partition from 1 MiB (GRUB's core image goes in
# the gap before it), the root tree written into it at that offset.
raw=$WORK/disk.raw
truncate -s "${SIZE}G" "$raw"
echo 'start=2048, type=83, bootable' | sfdisk -q "$raw" || die "sfdisk failed"
part_kib=$(( SIZE * 1024 * 1024 - 1024 ))
mke2fs -q -F -t ext4 -L kthost-root -d "$ROOT" -E offset=1048576 "$raw" "${part_kib}k" ||
  die "mke2fs -d of the root tree failed"

say "provisioning boot (grub-install, update-grub) under TCG"
console=$WORK/setup-console.log
timeout 600 qemu-system-x86_64 -machine q35 -cpu max -m 1024 -smp 2 -accel tcg,thread=multi \
  -kernel "$ROOT/boot/vmlinuz-$ABI" -initrd "$ROOT/boot/initrd.img-$ABI" \
  -append "root=/dev/vda1 rw console=ttyS0 panic=-1 init=/usr/local/sbin/kthost-image-setup" \
  -drive file="$raw",format=raw,if=virtio -display none -no-reboot -serial file:"$console" -nic none ||
  { tail -30 "$console" >&2; die "the provisioning boot did not end by itself within 600 s"; }
grep -a -q 'KTHOST-IMAGE-SETUP ok' "$console" || { tail -30 "$console" >&2; die "the provisioning boot failed (console above)"; }

qemu-img convert -O qcow2 "$raw" "$OUTDIR/disk.qcow2"
version=$(dpkg-deb -f "${LOCAL_DEBS[0]}" Version)
dpkg-query --admindir="$ROOT/var/lib/dpkg" -W -f='${Package}\t${Version}\n' | python3 -c '
import json, sys
pkgs = dict(line.rstrip("\n").split("\t", 1) for line in sys.stdin if "\t" in line)
json.dump({"kind": "disk", "format": "qcow2", "kernel": sys.argv[1], "staged_kernel": sys.argv[2] or None,
           "guest_kit": sys.argv[3], "size_gib": int(sys.argv[4]), "packages": pkgs}, sys.stdout, indent=1, sort_keys=True)
' "$ABI" "$STAGE_ABI" "$version" "$SIZE" >"$OUTDIR/manifest.json"
echo "$STAMP_TEXT" >"$OUTDIR/.stamp"
say "wrote $OUTDIR/disk.qcow2 ($(du -m "$OUTDIR/disk.qcow2" | cut -f1) MiB) in $(( $(date +%s) - start )) s"
