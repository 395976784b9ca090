#!/bin/sh
# Configures and builds kthost (developer build: warnings are errors) and the
# test VM image.  Usage: scripts/build.sh [BUILD_DIR]
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
cmake --build "$build" --target vm-image
