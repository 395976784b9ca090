#!/bin/bash
# Builds the guest kit's Debian packages from this source tree:
#   OUTDIR/ktguest_V_amd64.deb            the helper daemon and its systemd unit
#   OUTDIR/ktguard-dkms_V_all.deb         ktguard's source for DKMS, loaded at boot
#   OUTDIR/kthost-test-agent_V_amd64.deb  ktexec and ktprobe, for test images
# and checks each with lintian (any error fails the build).
#
# usage: build-debs.sh OUTDIR [--no-lintian]
# V is the CMake project version, plus the commit's date and hash in a git
# checkout (0.1.0+git20261201195800.9037f30). The build runs in a scratch copy
# of the files the packages need (dpkg-buildpackage -b, debhelper, dh_dkms),
# so the source tree stays clean. Build dependencies: scripts/install-deps.sh.
set -euo pipefail
export LC_ALL=C
die() { echo "build-debs: error: $*" >&2; exit 1; }
say() { echo "build-debs: $*"; }

OUTDIR="" LINTIAN=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-lintian) LINTIAN=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -z "$OUTDIR" ] || die "more than one OUTDIR"; OUTDIR=$1; shift ;;
  esac
done
[ -n "$OUTDIR" ] || die "usage: build-debs.sh OUTDIR [--no-lintian]"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
for cmd in dpkg-buildpackage dh dh_dkms cmake; do
  command -v "$cmd" >/dev/null || die "$cmd not found (scripts/install-deps.sh installs the packaging tools)"
done
[ "$LINTIAN" = 0 ] || command -v lintian >/dev/null || die "lintian not found"

base=$(sed -n 's/^project(kthost VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
[ -n "$base" ] || die "no project version in $SRC/CMakeLists.txt"
version=$base commit="no git checkout" date=$(date -R -d @0)
if git -C "$SRC" rev-parse HEAD >/dev/null 2>&1; then
  version="$base+git$(TZ=UTC git -C "$SRC" log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd).$(git -C "$SRC" rev-parse --short=7 HEAD)"
  commit="commit $(git -C "$SRC" rev-parse --short=12 HEAD)"
  date=$(git -C "$SRC" log -1 --format=%cD)
  git -C "$SRC" diff --quiet HEAD -- CMakeLists.txt cmake guest-kit || commit="$commit, with uncommitted changes"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kthost-debs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
tree=$WORK/kthost-guest-$version
mkdir -p "$tree"
cp -a "$SRC/CMakeLists.txt" "$SRC/cmake" "$tree/"
mkdir -p "$tree/guest-kit"
for d in "$SRC"/guest-kit/*; do
  [ "$(basename "$d")" = debian ] || cp -a "$d" "$tree/guest-kit/"
done
cp -a "$SRC/guest-kit/debian" "$tree/debian"
rm -f "$tree/debian/build-debs.sh" "$tree/debian/changelog.in"
sed -e "s|@VERSION@|$version|" -e "s|@COMMIT@|$commit|" -e "s|@DATE@|$date|" \
  "$SRC/guest-kit/debian/changelog.in" >"$tree/debian/changelog"

say "building kthost-guest $version"
if ! (cd "$tree" && SOURCE_DATE_EPOCH=$(date -d "$date" +%s) dpkg-buildpackage -b -us -uc >"$WORK/build.log" 2>&1); then
  tail -40 "$WORK/build.log" >&2
  die "dpkg-buildpackage failed (log above)"
fi
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/ktguest_*.deb "$OUTDIR"/ktguard-dkms_*.deb "$OUTDIR"/kthost-test-agent_*.deb
for pkg in ktguest ktguard-dkms kthost-test-agent; do
  deb=$(ls "$WORK"/${pkg}_"$version"_*.deb 2>/dev/null | head -n1)
  [ -n "$deb" ] || die "dpkg-buildpackage made no $pkg package"
  cp "$deb" "$OUTDIR/"
done
if [ "$LINTIAN" = 1 ]; then
  # Errors fail; warnings and informational tags are printed for people.
  if ! lintian --fail-on error --tag-display-limit 0 "$OUTDIR"/*_"$version"_*.deb >"$OUTDIR/lintian.txt" 2>&1; then
    cat "$OUTDIR/lintian.txt" >&2
    die "lintian found errors (above; $OUTDIR/lintian.txt)"
  fi
  say "lintian: no errors ($(grep -c '^W:' "$OUTDIR/lintian.txt" || true) warnings; $OUTDIR/lintian.txt)"
fi
echo "$version" >"$OUTDIR/version"
say "wrote $(cd "$OUTDIR" && ls ./*_"$version"_*.deb | tr '\n' ' ')"
