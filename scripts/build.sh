#!/bin/sh
# Configures and builds kthost (developer build: warnings are errors) and the
# test VM image.  Usage: scripts/build.sh [BUILD_DIR]
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
. "$src/scripts/lib/ccache.sh"
kthost_ccache_setup "$src"
# shellcheck disable=SC2086
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo $KTHOST_LAUNCHER >/dev/null
kthost_ccache_zero
cmake --build "$build" -j"$(nproc)"
kthost_ccache_report "$build"
cmake --build "$build" --target vm-image
