#!/usr/bin/env bash
# Runs one GoogleTest suite for CTest and tells CTest what happened: the
# binary's own status when it failed, 77 (the test's SKIP_RETURN_CODE) when it
# passed but skipped a test. So a skip never reads as a pass, and a failure is
# never hidden behind a skip.  Usage: run-suite.sh BINARY ARGS...
set -u -o pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
if grep -q '^\[  SKIPPED \]' "$log"; then
  echo "run-suite: passed, but skipped the tests listed above (a skip is not a pass)"
  exit 77
fi
grep -q '^\[  PASSED  \] [1-9]' "$log" || { echo "run-suite: no test ran"; exit 1; }
exit 0
