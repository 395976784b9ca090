#!/bin/sh
# Decode benchmark, one run: decoded instructions per second for libipt's
# instruction decoder (baseline), kthost's decoder on one thread and on every
# core, on one large synthetic trace; prints the ratios.
#   tests/bench/run-decode-bench.sh [BUILD_DIR] [MILLION_INSTRUCTIONS]
set -eu
build=${1:-build}
insns=${2:-200}
echo "== decode: $(nproc) cores"
"$build/tests/bench/bench_decode" --insns "$insns"
