#!/usr/bin/env bash
# All tests: unit tests, VM integration tests against real QEMU guests, the
# unit tests again under ASan+UBSan, and every fuzz target for a bounded time
# under ASan+UBSan.  Environment: FUZZ_SECONDS (default 16 per target: 16
# targets, and CI has one hour for all of this; fuzz longer by hand).
# vm_DiskImage runs in the background while the ASan build, its unit tests and
# the fuzz targets run; the script waits for it and fails with it.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build}
asan=${ASAN_BUILD_DIR:-$src/build-asan}
fuzz_seconds=${FUZZ_SECONDS:-16}
"$src/scripts/install-deps.sh"
. "$src/scripts/lib/ccache.sh"
kthost_ccache_setup "$src"
"$src/scripts/build.sh" "$build"

# A skipped test is not a passed one: this script installs every package and
# runs as root, so nothing here has a reason to skip. KTHOST_ALLOW_SKIPS=1
# lets a developer's partial run through (never CI).
run_ctest() {  # DIR LOG ARGS...
  dir=$1 log=$2
  shift 2
  set +e
  (cd "$dir" && ctest --output-on-failure "$@") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -eq 0 ] || { echo "== ctest failed (status $rc; log $log)"; exit 1; }
  skipped=$(grep -c '(Skipped)' "$log" || true)
  if [ "$skipped" -gt 0 ] && [ "${KTHOST_ALLOW_SKIPS:-0}" != 1 ]; then
    echo "== $skipped test(s) skipped: a skip is a failure here (KTHOST_ALLOW_SKIPS=1 for a partial local run)"
    exit 1
  fi
}

# vm_DiskImage (about 20 minutes, most of it a kernel upgrade inside its TCG
# guest, with limits of 600 s to 2400 s on each step) runs beside the ASan
# build, the ASan unit tests and the fuzz targets, which time nothing: the
# other VM tests run first, alone, as their timeouts and measurements assume.
disk_image_test='^vm_DiskImage$'
disk_pid=""
# An early exit stops it and everything under it (ctest does not pass SIGTERM
# on, and timeout(1) puts its command in a process group of its own): the test
# script's own trap then undefines its domain.
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
stop_disk_image() {
  [ -n "$disk_pid" ] || return 0
  # shellcheck disable=SC2046
  kill -TERM "$disk_pid" $(descendants "$disk_pid") 2>/dev/null || true
}
trap stop_disk_image EXIT

echo "== unit and VM integration tests (ctest), all but vm_DiskImage"
run_ctest "$build" "$build/ctest.log" --timeout 900 -E "$disk_image_test"

if [ -n "$(cd "$build" && ctest -N -R "$disk_image_test" | grep -o 'vm_DiskImage')" ]; then
  echo "== vm_DiskImage, in the background beside the ASan build and the fuzz targets (log $build/ctest-disk-image.log)"
  rm -f "$build/ctest-disk-image.rc"
  # shellcheck disable=SC2016  # $1 and $2 are the inner shell's
  bash -c 'cd "$1" && ctest --output-on-failure --timeout 900 --no-tests=error -R "$2" >"$1/ctest-disk-image.log" 2>&1
                  echo $? >"$1/ctest-disk-image.rc"' _ "$build" "$disk_image_test" &
  disk_pid=$!
fi

echo "== ASan+UBSan build (clang-14) with fuzz targets"
# shellcheck disable=SC2086
CC=clang-14 CXX=clang++-14 cmake -S "$src" -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKTHOST_SANITIZE=ON -DKTHOST_FUZZ=ON -DKTHOST_GUEST_KIT=OFF $KTHOST_LAUNCHER >/dev/null
# Only what runs under the sanitizers: the unit tests and every fuzz target
# (the CLI, the VM tests and the benches are the plain build's).
kthost_ccache_zero
# shellcheck disable=SC2046
cmake --build "$asan" -j"$(nproc)" --target kthost_unit_tests \
  $(cd "$src/tests/fuzz" && for f in fuzz_*.cpp; do echo "${f%.cpp}"; done)
kthost_ccache_report "$asan"
echo "== unit tests under ASan+UBSan"
run_ctest "$asan" "$asan/ctest.log" -L unit

echo "== fuzz targets, ${fuzz_seconds}s each"
fuzzed=0
for target in "$asan"/tests/fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  fuzzed=$((fuzzed + 1))
  name=$(basename "$target")
  corpus="$asan/fuzz-corpus/$name"
  mkdir -p "$corpus"
  seeds="$src/tests/fuzz/corpus/$name"
  [ -d "$seeds" ] || seeds=""
  log="$asan/fuzz-$name.log"
  mkdir -p "$asan/fuzz-artifacts"
  # shellcheck disable=SC2086
  if ! "$target" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
      -artifact_prefix="$asan/fuzz-artifacts/$name-" "$corpus" $seeds >"$log" 2>&1; then
    echo "-- $name: FAILED"; tail -40 "$log"; exit 1
  fi
  echo "-- $name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs, no failure"
done
if [ "$fuzzed" -eq 0 ]; then
  echo "== no fuzz target was built in $asan/tests/fuzz: that is a failure"
  exit 1
fi
if [ -n "$disk_pid" ]; then
  echo "== waiting for vm_DiskImage"
  wait "$disk_pid" || true
  disk_pid=""
  cat "$build/ctest-disk-image.log"
  rc=$(cat "$build/ctest-disk-image.rc" 2>/dev/null || echo "none")
  [ "$rc" = 0 ] || { echo "== vm_DiskImage failed (ctest status $rc; log $build/ctest-disk-image.log)"; exit 1; }
  if grep -q '(Skipped)' "$build/ctest-disk-image.log" && [ "${KTHOST_ALLOW_SKIPS:-0}" != 1 ]; then
    echo "== vm_DiskImage was skipped: a skip is a failure here"
    exit 1
  fi
fi
echo "== all tests passed ($fuzzed fuzz targets)"
