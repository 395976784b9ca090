#!/bin/bash
# Builds the kthost test image from Debian's archive:
#   OUTDIR/{vmlinuz, initrd.gz, System.map, config, manifest.json, modules/}
#
# usage: build-image.sh OUTDIR --guest-kit DIR [--cache DIR] [--ktguard FILE]
#                      [--kernel SPEC | --kernel-tree DIR]
#   --guest-kit DIR    holds the static ktexec, ktprobe and ktguest binaries
#   --cache DIR        where downloaded .debs are kept (default OUTDIR/cache)
#   --ktguard FILE     ktguard.ko (guest-kit/ktguard/build.sh), installed as
#                      /lib/kthost-test/ktguard.ko; init loads it at boot
#   --module FILE      an extra module for the workloads (repeatable), built
#                      for the image's kernel: /lib/kthost-test/NAME.ko
#   --kernel SPEC      the guest kernel, from Debian's archive or a file:
#                      a flavour (amd64, rt-amd64, cloud-amd64: its newest
#                      ABI), an ABI with its flavour (6.1.0-47-amd64,
#                      6.1.0-50-rt-amd64), or a local linux-image .deb.
#                      Default: amd64
#   --kernel-tree DIR  a kernel build tree instead, as a CI job that builds
#                      kernels has it: arch/x86/boot/bzImage, the modules'
#                      .ko files, include/config/kernel.release, .config,
#                      System.map (and vmlinux, for kthost report --vmlinux)
#
# A flavour's ABI is resolved at build time from linux-image-FLAVOUR: a pinned
# ABI disappears from the archive. The output is reproducible for the same
# packages and inputs (fixed mtimes, sorted cpio, gzip -n), and the build is
# skipped when a stamp of all inputs matches.
set -euo pipefail
umask 022
export LC_ALL=C

die() { echo "vm-image: error: $*" >&2; exit 1; }
say() { echo "vm-image: $*"; }

OUTDIR="" GUEST_KIT="" CACHE="" KTGUARD="" KERNEL=amd64 KTREE="" EXTRA_MODULES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --guest-kit) GUEST_KIT=${2:?--guest-kit needs a directory}; shift 2 ;;
    --cache) CACHE=${2:?--cache needs a directory}; shift 2 ;;
    --ktguard) KTGUARD=${2:?--ktguard needs a file}; shift 2 ;;
    --module) EXTRA_MODULES+=("${2:?--module needs a .ko file}"); shift 2 ;;
    --kernel) KERNEL=${2:?--kernel needs a flavour, an ABI or a .deb}; shift 2 ;;
    --kernel-tree) KTREE=${2:?--kernel-tree needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$OUTDIR" ] || die "more than one OUTDIR"; OUTDIR=$1; shift ;;
  esac
done
[ -n "$OUTDIR" ] || die "usage: build-image.sh OUTDIR --guest-kit DIR [--cache DIR] [--ktguard FILE]"
[ -z "$KTGUARD" ] || [ -f "$KTGUARD" ] || die "--ktguard $KTGUARD: no such file"
for ko in ${EXTRA_MODULES[@]+"${EXTRA_MODULES[@]}"}; do
  [ -f "$ko" ] && [ "${ko%.ko}" != "$ko" ] || die "--module $ko: not a .ko file"
done
[ -n "$GUEST_KIT" ] || die "--guest-kit DIR is required"
for tool in ktexec ktprobe ktguest; do
  [ -x "$GUEST_KIT/$tool" ] || die "$GUEST_KIT/$tool is missing or not executable"
done
for cmd in apt-cache apt-get dpkg-deb cpio gzip sha256sum python3; do
  command -v "$cmd" >/dev/null || die "$cmd not found"
done
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
CACHE=${CACHE:-$OUTDIR/cache}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)

# Modules /init loads, in any order: the real order comes from depends=.
WANTED_MODULES="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_console"
# Loads under TCG without hardware; tests insmod/rmmod it.
TEST_MODULES="dummy"

sha() { sha256sum "$1" | cut -d' ' -f1; }

# resolve_kernel_package SPEC, candidate_versions PKG...
# shellcheck source=kernel-spec.sh
. "$HERE/kernel-spec.sh"

BBPKG=busybox-static
KDEB_LOCAL="" KPKG="" KVER=""
if [ -n "$KTREE" ]; then
  KTREE=$(cd "$KTREE" && pwd) || die "--kernel-tree $KTREE: no such directory"
  for f in arch/x86/boot/bzImage include/config/kernel.release .config System.map; do
    [ -f "$KTREE/$f" ] || die "--kernel-tree $KTREE is not a built kernel tree: no $f"
  done
  KPKG=tree KVER=$(cat "$KTREE/include/config/kernel.release")
elif [ "${KERNEL%.deb}" != "$KERNEL" ]; then
  [ -f "$KERNEL" ] || die "--kernel $KERNEL: no such file"
  KDEB_LOCAL=$(cd "$(dirname "$KERNEL")" && pwd)/$(basename "$KERNEL")
  KPKG=$(dpkg-deb -f "$KDEB_LOCAL" Package) KVER=$(dpkg-deb -f "$KDEB_LOCAL" Version) ||
    die "--kernel $KERNEL is not a Debian package"
  case $KPKG in linux-image-*) ;; *) die "--kernel $KERNEL holds $KPKG, not a linux-image package" ;; esac
else
  KPKG=$(resolve_kernel_package "$KERNEL")
  if [ -z "$KPKG" ]; then
    say "kernel '$KERNEL' unknown to apt; running apt-get update"
    apt-get update -qq || die "apt-get update failed"
    KPKG=$(resolve_kernel_package "$KERNEL")
  fi
  [ -n "$KPKG" ] || die "the archive has no kernel '$KERNEL' (a flavour such as amd64 or rt-amd64, or an ABI such as 6.1.0-47-amd64; apt-cache search linux-image- lists them)"
fi
VERSIONS=$(candidate_versions $([ -n "$KTREE$KDEB_LOCAL" ] || echo "$KPKG") "$BBPKG")
[ -n "$KTREE$KDEB_LOCAL" ] || KVER=$(echo "$VERSIONS" | awk -v p="$KPKG" '$1 == p { print $2 }')
BBVER=$(echo "$VERSIONS" | awk -v p="$BBPKG" '$1 == p { print $2 }')
[ -n "$KVER" ] && [ -n "$BBVER" ] || die "no candidate version for $KPKG or $BBPKG"
say "kernel ${KTREE:+tree $KTREE, release }$KPKG $KVER, $BBPKG $BBVER"

STAMP_TEXT=$(
  echo "script $(sha "$0")"
  echo "init $(sha "$HERE/init")"
  echo "kernel-spec $(sha "$HERE/kernel-spec.sh")"
  echo "ktexec $(sha "$GUEST_KIT/ktexec")"
  echo "ktprobe $(sha "$GUEST_KIT/ktprobe")"
  echo "ktguest $(sha "$GUEST_KIT/ktguest")"
  [ -z "$KTGUARD" ] || echo "ktguard $(sha "$KTGUARD")"
  for ko in ${EXTRA_MODULES[@]+"${EXTRA_MODULES[@]}"}; do echo "module $(basename "$ko") $(sha "$ko")"; done
  echo "kernel $KERNEL tree ${KTREE:-none}"
  if [ -n "$KTREE" ]; then echo "tree $(sha "$KTREE/arch/x86/boot/bzImage")"
  elif [ -n "$KDEB_LOCAL" ]; then echo "deb $(sha "$KDEB_LOCAL")"; fi
  echo "package $KPKG $KVER"
  echo "package $BBPKG $BBVER"
  echo "epoch ${SOURCE_DATE_EPOCH:-package}"
)
if [ -f "$OUTDIR/.stamp" ] && [ "$(cat "$OUTDIR/.stamp")" = "$STAMP_TEXT" ] &&
   [ -f "$OUTDIR/manifest.json" ] && [ -f "$OUTDIR/vmlinuz" ] && [ -f "$OUTDIR/initrd.gz" ]; then
  say "up to date"
  exit 0
fi
rm -f "$OUTDIR/.stamp"

# Prints the cached .deb of PKG at VERSION, downloading it if needed.
fetch_deb() {
  local pkg=$1 ver=$2 f
  for f in "$CACHE/${pkg}_"*.deb; do
    [ -f "$f" ] || continue
    if [ "$(dpkg-deb -f "$f" Package)" = "$pkg" ] && [ "$(dpkg-deb -f "$f" Version)" = "$ver" ]; then
      echo "$f"
      return 0
    fi
  done
  say "downloading $pkg=$ver" >&2
  if ! (cd "$CACHE" && apt-get download -q "$pkg=$ver" >&2 2>/dev/null); then
    say "download failed; running apt-get update and retrying" >&2
    apt-get update -qq >&2 || die "apt-get update failed"
    (cd "$CACHE" && apt-get download -q "$pkg=$ver" >&2) || die "apt-get download $pkg=$ver failed"
  fi
  fetch_deb "$pkg" "$ver"
}

BBDEB=$(fetch_deb "$BBPKG" "$BBVER")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kthost-vm-image.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
dpkg-deb -x "$BBDEB" "$WORK/busybox"
if [ -n "$KTREE" ]; then
  # The tree's files laid out as a package would have them; modules are
  # looked up in the tree itself.
  RELEASE=$KVER
  mkdir -p "$WORK/kernel/boot"
  cp "$KTREE/arch/x86/boot/bzImage" "$WORK/kernel/boot/vmlinuz-$RELEASE"
  cp "$KTREE/System.map" "$WORK/kernel/boot/System.map-$RELEASE"
  cp "$KTREE/.config" "$WORK/kernel/boot/config-$RELEASE"
  KDIR=$KTREE
  BUILTIN=$KTREE/modules.builtin
  KDEB=""
else
  KDEB=${KDEB_LOCAL:-$(fetch_deb "$KPKG" "$KVER")}
  say "extracting $KPKG"
  dpkg-deb -x "$KDEB" "$WORK/kernel"
  RELEASE=$(ls "$WORK/kernel/lib/modules")
  [ "$(echo "$RELEASE" | wc -l)" = 1 ] || die "expected one kernel release in $KDEB, got: $RELEASE"
  KDIR=$WORK/kernel/lib/modules/$RELEASE/kernel
  BUILTIN=$WORK/kernel/lib/modules/$RELEASE/modules.builtin
fi
[ -f "$WORK/kernel/boot/vmlinuz-$RELEASE" ] || die "no vmlinuz-$RELEASE in ${KDEB:-$KTREE}"
EPOCH=${SOURCE_DATE_EPOCH:-$(stat -c %Y "$WORK/kernel/boot/vmlinuz-$RELEASE")}
say "kernel release $RELEASE, SOURCE_DATE_EPOCH $EPOCH"

# Built into this kernel (modules.builtin lists kernel/.../NAME.ko): nothing to load.
builtin() {
  [ -f "$BUILTIN" ] && grep -Eq "/($1|$(echo "$1" | tr _ -))\.ko\$" "$BUILTIN"
}

# Module file for a module name (depends= uses '_', some files use '-').
module_file() {
  local f
  f=$(find "$KDIR" \( -name "$1.ko" -o -name "$(echo "$1" | tr _ -).ko" \) | sort | head -n1)
  if [ -z "$f" ] && find "$KDIR" -name "$1.ko.*" | grep -q .; then
    die "module $1 is compressed; this script handles plain .ko only"
  fi
  [ -n "$f" ] || die "module $1 is neither a module nor built into $KPKG $KVER"
  echo "$f"
}
module_depends() {
  tr '\0' '\n' <"$(module_file "$1")" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' '
}

# Depth-first post-order: every module after the modules it depends on.
ORDER=""
VISITING=""
visit() {
  local mod=$1 dep
  case " $ORDER " in *" $mod "*) return 0 ;; esac
  builtin "$mod" && return 0
  case " $VISITING " in *" $mod "*) die "module dependency cycle at $mod" ;; esac
  VISITING="$VISITING $mod"
  for dep in $(module_depends "$mod"); do visit "$dep"; done
  ORDER="$ORDER $mod"
}
for mod in $WANTED_MODULES; do visit "$mod"; done
ORDER=${ORDER# }
say "module load order: $ORDER"
MISSING_TEST_MODULES=""
for mod in $TEST_MODULES; do
  if builtin "$mod" || ! find "$KDIR" -name "$mod.ko" | grep -q .; then
    say "note: this kernel has no loadable $mod.ko; tests that load it cannot run on this image"
    MISSING_TEST_MODULES="$MISSING_TEST_MODULES $mod"
    continue
  fi
  deps=$(module_depends "$mod")
  [ -z "$deps" ] || die "test module $mod depends on '$deps'; pick a self-contained one"
done
for mod in $MISSING_TEST_MODULES; do TEST_MODULES=$(echo " $TEST_MODULES " | sed "s/ $mod / /;s/^ //;s/ \$//"); done

say "assembling the initramfs"
ROOT=$WORK/root
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,root,etc,mnt,var}
mkdir -p "$ROOT/lib/modules/$RELEASE/kthost" "$ROOT/lib/kthost-test"
chmod 1777 "$ROOT/tmp"
install -m 755 "$WORK/busybox/bin/busybox" "$ROOT/bin/busybox"
"$ROOT/bin/busybox" --list-full | while read -r applet; do
  [ -e "$ROOT/$applet" ] || [ "$applet" = linuxrc ] || ln -s /bin/busybox "$ROOT/$applet"
done
install -m 755 "$GUEST_KIT/ktexec" "$GUEST_KIT/ktprobe" "$GUEST_KIT/ktguest" "$ROOT/usr/bin/"
install -m 755 "$HERE/init" "$ROOT/init"
: >"$ROOT/lib/modules/$RELEASE/kthost/load-order"  # empty when all of them are built in
for mod in $ORDER; do
  install -m 644 "$(module_file "$mod")" "$ROOT/lib/modules/$RELEASE/kthost/$mod.ko"
  echo "$mod" >>"$ROOT/lib/modules/$RELEASE/kthost/load-order"
done
for mod in $TEST_MODULES; do
  install -m 644 "$(module_file "$mod")" "$ROOT/lib/kthost-test/$mod.ko"
done
if [ -n "$KTGUARD" ]; then
  vermagic=$(tr '\0' '\n' <"$KTGUARD" | sed -n 's/^vermagic=\([^ ]*\).*/\1/p' | head -n1)
  [ "$vermagic" = "$RELEASE" ] || die "$KTGUARD is built for '$vermagic', the image runs $RELEASE"
  install -m 644 "$KTGUARD" "$ROOT/lib/kthost-test/ktguard.ko"
fi
for ko in ${EXTRA_MODULES[@]+"${EXTRA_MODULES[@]}"}; do
  vermagic=$(tr '\0' '\n' <"$ko" | sed -n 's/^vermagic=\([^ ]*\).*/\1/p' | head -n1)
  [ "$vermagic" = "$RELEASE" ] || die "--module $ko is built for '$vermagic', the image runs $RELEASE"
  install -m 644 "$ko" "$ROOT/lib/kthost-test/$(basename "$ko")"
done
echo "root:x:0:0:root:/root:/bin/sh" >"$ROOT/etc/passwd"
echo "root:x:0:" >"$ROOT/etc/group"
find "$ROOT" -exec touch -h -d "@$EPOCH" {} +

NEW=$WORK/out
mkdir -p "$NEW/modules"
(cd "$ROOT" && find . -print0 | sort -z |
  cpio -o -0 -H newc --reproducible --owner=0:0 --quiet) | gzip -n -9 >"$NEW/initrd.gz"
install -m 644 "$WORK/kernel/boot/vmlinuz-$RELEASE" "$NEW/vmlinuz"
install -m 644 "$WORK/kernel/boot/System.map-$RELEASE" "$NEW/System.map"
install -m 644 "$WORK/kernel/boot/config-$RELEASE" "$NEW/config"
# Debian ships a one-line System.map; the real one is in the huge -dbg package.
SYSTEM_MAP_PLACEHOLDER=false
if [ "$(wc -l <"$NEW/System.map")" -lt 1000 ]; then
  SYSTEM_MAP_PLACEHOLDER=true
  say "note: System.map is Debian's placeholder; read symbols from the guest's /proc/kallsyms"
fi
find "$ROOT/lib/modules/$RELEASE/kthost" "$ROOT/lib/kthost-test" -name '*.ko' -exec cp {} "$NEW/modules/" \;

say "writing manifest.json"
SYSTEM_MAP_PLACEHOLDER=$SYSTEM_MAP_PLACEHOLDER KERNEL_SOURCE=${KTREE:+tree $KTREE} \
python3 - "$NEW" "$RELEASE" "$EPOCH" "$ORDER" "$TEST_MODULES" "$GUEST_KIT" $KDEB "$BBDEB" <<'PY'
import hashlib, json, os, subprocess, sys
out, release, epoch, order, test, kit = sys.argv[1:7]
debs = sys.argv[7:]
def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
def field(deb, name):
    return subprocess.run(["dpkg-deb", "-f", deb, name], check=True, capture_output=True,
                          text=True).stdout.strip()
files = {}
for root, _, names in os.walk(out):
    for name in names:
        path = os.path.join(root, name)
        files[os.path.relpath(path, out)] = sha(path)
manifest = {
    "version": 1,
    "kernel_release": release,
    "source_date_epoch": int(epoch),
    "packages": [{"name": field(d, "Package"), "version": field(d, "Version"),
                  "architecture": field(d, "Architecture"), "deb_sha256": sha(d)} for d in debs],
    "kernel_source": os.environ.get("KERNEL_SOURCE") or "package",
    "system_map_placeholder": os.environ["SYSTEM_MAP_PLACEHOLDER"] == "true",
    "modules": {"load_order": order.split(), "test": test.split()},
    "guest_kit": {t: sha(os.path.join(kit, t)) for t in ("ktexec", "ktprobe", "ktguest")},
    "files": dict(sorted(files.items())),
}
with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
PY

rm -rf "$OUTDIR/modules"
for f in vmlinuz initrd.gz System.map config manifest.json; do
  mv -f "$NEW/$f" "$OUTDIR/$f"
done
mv "$NEW/modules" "$OUTDIR/modules"
echo "$STAMP_TEXT" >"$OUTDIR/.stamp"
say "built $OUTDIR (kernel $RELEASE, initrd $(stat -c %s "$OUTDIR/initrd.gz") bytes)"
