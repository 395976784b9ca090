#!/bin/sh
# Installs every Debian package kthost needs to build, test and run its test
# VM. Idempotent; run as root on Debian 12.
set -eu
PACKAGES="build-essential cmake pkg-config g++ ccache clang-14 libfuzzer-14-dev libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libipt-dev libelf-dev libdw-dev libzydis-dev
  qemu-system-x86 qemu-utils busybox-static cpio gzip binutils
  python3 procps coreutils apt-utils
  libvirt-dev libxml2-dev libvirt-daemon libvirt-daemon-driver-qemu libvirt-daemon-system libvirt-clients
  libxml2-utils librsvg2-bin linux-perf chromium-headless-shell
  debhelper dh-dkms dkms dpkg-dev lintian mmdebstrap fdisk e2fsprogs
  linux-source-6.1 bc flex bison libssl-dev dwarves kmod xz-utils llvm-14"
# libxml2-utils (xmllint) and librsvg2-bin (rsvg-convert): the flame graph SVG
# test checks the XML and renders it; chromium-headless-shell runs its
# script (zoom, search) in a real browser (tests/tools/check-flame-browser.py).
# linux-perf: perf's own Intel PT decoder reads `kthost export`'s output and
# checks kthost's decode against it (tests/tools/check-perf-export.py).
# libvirt: libvirt-dev + libxml2-dev build host/libvirt; libvirt-daemon
# (libvirtd, virtlogd), its QEMU driver, libvirt-daemon-system
# (/etc/libvirt/qemu.conf) and libvirt-clients (virsh) run the test domain.
# Without systemd, vm-images/libvirt/kthost-libvirt.sh start-daemon starts
# the daemons by hand.
# ccache: CI (.ci/run, KTHOST_CCACHE=1) compiles only what changed since its
# last run (scripts/lib/ccache.sh).
# debhelper, dh-dkms, dkms, dpkg-dev, lintian: the guest kit's Debian packages
# (guest-kit/debian/build-debs.sh); mmdebstrap, fdisk (sfdisk), e2fsprogs
# (mke2fs -d): the systemd disk image (vm-images/build-disk-image.sh).
# linux-source-6.1, bc, flex, bison, libssl-dev, dwarves (pahole, for BTF),
# kmod, xz-utils: a real kernel build tree for the build-tree test
# (vm-images/build-kernel-tree.sh); llvm-14 (llvm-addr2line) checks the
# source lines of `kthost report --vmlinux` on it.
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "install-deps: done"
