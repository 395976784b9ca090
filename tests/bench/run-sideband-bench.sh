#!/bin/sh
# Sideband benchmark, one run: the protocol's host decode rate (against a
# memcpy baseline), then a real TCG guest's ftrace storm end to end.
#   tests/bench/run-sideband-bench.sh [BUILD_DIR]
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
state=$(mktemp -d /tmp/kthost-sbbench-XXXXXX)
trap '"$src/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT INT TERM
echo "== protocol decode rate"
"$build/tests/bench/bench_ktproto"
echo "== real guest: ftrace storm through virtio-serial"
"$src/vm-images/ktvm" start --image "$build/vm-image" --state-dir "$state" --name sbbench --tcg-threads single >/dev/null
"$build/tests/bench/bench_sideband_pipe" --vm "$state/vm.json"
