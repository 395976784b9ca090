#!/bin/sh
# Introspection benchmark, one run: synthetic page-walk numbers, then a real
# TCG guest booted from the test image for snapshot throughput per backend
# against QMP xp.  Usage: tests/bench/run-introspect-bench.sh [BUILD_DIR]
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
state=$(mktemp -d /tmp/kthost-bench-XXXXXX)
trap '"$src/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT INT TERM
echo "== synthetic page tables"
"$build/tests/bench/bench_page_walker"
echo "== real guest"
"$src/vm-images/ktvm" start --image "$build/vm-image" --state-dir "$state" --name bench >/dev/null
"$build/tests/bench/bench_guest_memory" --vm "$state/vm.json"
