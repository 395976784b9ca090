#!/bin/bash
# Builds the kthost test image from Debian's archive:
#   OUTDIR/{vmlinuz, initrd.gz, System.map, config, manifest.json, modules/}
#
# usage: build-image.sh OUTDIR --guest-kit DIR [--cache DIR] [--ktguard FILE]
#   --guest-kit DIR  holds the static ktexec, ktprobe and ktguest binaries
#   --cache DIR      where downloaded .debs are kept (default OUTDIR/cache)
#   --ktguard FILE   ktguard.ko (guest-kit/ktguard/build.sh), installed as
#                    /lib/kthost-test/ktguard.ko; init loads it at boot
#
# The kernel ABI is resolved at build time from linux-image-amd64: a pinned
# ABI disappears from the archive. The output is reproducible for the same
# packages and inputs (fixed mtimes, sorted cpio, gzip -n), and the build is
# skipped when a stamp of all inputs matches.
set -euo pipefail
umask 022
export LC_ALL=C

die() { echo "vm-image: error: $*" >&2; exit 1; }
say() { echo "vm-image: $*"; }

OUTDIR="" GUEST_KIT="" CACHE="" KTGUARD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --guest-kit) GUEST_KIT=${2:?--guest-kit needs a directory}; shift 2 ;;
    --cache) CACHE=${2:?--cache needs a directory}; shift 2 ;;
    --ktguard) KTGUARD=${2:?--ktguard needs a file}; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$OUTDIR" ] || die "more than one OUTDIR"; OUTDIR=$1; shift ;;
  esac
done
[ -n "$OUTDIR" ] || die "usage: build-image.sh OUTDIR --guest-kit DIR [--cache DIR] [--ktguard FILE]"
[ -z "$KTGUARD" ] || [ -f "$KTGUARD" ] || die "--ktguard $KTGUARD: no such file"
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

# Prints "PACKAGE CANDIDATE-VERSION" per package, in one apt-cache call (each costs ~1 s).
candidate_versions() {
  apt-cache policy "$@" 2>/dev/null | awk '/^[^ ].*:$/ { pkg = substr($1, 1, length($1) - 1) }
    /^ *Candidate: / && $2 != "(none)" { print pkg, $2 }'
}

resolve_kernel_package() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1
}

KPKG=$(resolve_kernel_package)
if [ -z "$KPKG" ]; then
  say "linux-image-amd64 unknown to apt; running apt-get update"
  apt-get update -qq || die "apt-get update failed"
  KPKG=$(resolve_kernel_package)
fi
[ -n "$KPKG" ] || die "cannot resolve the kernel package from linux-image-amd64"
BBPKG=busybox-static
VERSIONS=$(candidate_versions "$KPKG" "$BBPKG")
KVER=$(echo "$VERSIONS" | awk -v p="$KPKG" '$1 == p { print $2 }')
BBVER=$(echo "$VERSIONS" | awk -v p="$BBPKG" '$1 == p { print $2 }')
[ -n "$KVER" ] && [ -n "$BBVER" ] || die "no candidate version for $KPKG or $BBPKG"
say "kernel package $KPKG $KVER, $BBPKG $BBVER"

STAMP_TEXT=$(
  echo "script $(sha "$0")"
  echo "init $(sha "$HERE/init")"
  echo "ktexec $(sha "$GUEST_KIT/ktexec")"
  echo "ktprobe $(sha "$GUEST_KIT/ktprobe")"
  echo "ktguest $(sha "$GUEST_KIT/ktguest")"
  [ -z "$KTGUARD" ] || echo "ktguard $(sha "$KTGUARD")"
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

KDEB=$(fetch_deb "$KPKG" "$KVER")
BBDEB=$(fetch_deb "$BBPKG" "$BBVER")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kthost-vm-image.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say "extracting packages"
dpkg-deb -x "$KDEB" "$WORK/kernel"
dpkg-deb -x "$BBDEB" "$WORK/busybox"

RELEASE=$(ls "$WORK/kernel/lib/modules")
[ "$(echo "$RELEASE" | wc -l)" = 1 ] || die "expected one kernel release in $KDEB, got: $RELEASE"
KDIR=$WORK/kernel/lib/modules/$RELEASE/kernel
[ -f "$WORK/kernel/boot/vmlinuz-$RELEASE" ] || die "no vmlinuz-$RELEASE in $KDEB"
EPOCH=${SOURCE_DATE_EPOCH:-$(stat -c %Y "$WORK/kernel/boot/vmlinuz-$RELEASE")}
say "kernel release $RELEASE, SOURCE_DATE_EPOCH $EPOCH"

# Module file for a module name (depends= uses '_', some files use '-').
module_file() {
  local f
  f=$(find "$KDIR" \( -name "$1.ko" -o -name "$(echo "$1" | tr _ -).ko" \) | sort | head -n1)
  if [ -z "$f" ] && find "$KDIR" -name "$1.ko.*" | grep -q .; then
    die "module $1 is compressed; this script handles plain .ko only"
  fi
  [ -n "$f" ] || die "module $1 not found in $KPKG"
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
  case " $VISITING " in *" $mod "*) die "module dependency cycle at $mod" ;; esac
  VISITING="$VISITING $mod"
  for dep in $(module_depends "$mod"); do visit "$dep"; done
  ORDER="$ORDER $mod"
}
for mod in $WANTED_MODULES; do visit "$mod"; done
ORDER=${ORDER# }
say "module load order: $ORDER"
for mod in $TEST_MODULES; do
  deps=$(module_depends "$mod")
  [ -z "$deps" ] || die "test module $mod depends on '$deps'; pick a self-contained one"
done

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
cp "$ROOT/lib/modules/$RELEASE/kthost/"*.ko "$ROOT/lib/kthost-test/"*.ko "$NEW/modules/"

say "writing manifest.json"
SYSTEM_MAP_PLACEHOLDER=$SYSTEM_MAP_PLACEHOLDER python3 - "$NEW" "$RELEASE" "$EPOCH" "$ORDER" "$TEST_MODULES" "$GUEST_KIT" "$KDEB" "$BBDEB" <<'PY'
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
