#!/bin/bash
# Manual smoke test of ktguard in a running test guest (not a ctest yet).
#   vm-smoke.sh KTHOST VM_JSON
# The image must have /lib/kthost-test/ktguard.ko (build-image.sh --ktguard).
# Each step prints what the guest printed; nothing here asserts yet.
set -uo pipefail
KTHOST=${1:?usage: vm-smoke.sh KTHOST VM_JSON}
VM=${2:?usage: vm-smoke.sh KTHOST VM_JSON}
P=/sys/module/ktguard/parameters
g() { echo "=== $1"; "$KTHOST" exec --vm "$VM" --timeout "${3:-60}" -- "$2"; echo "--- rc=$?"; }

g load "cat $P/hooks $P/hold_ms"
g unguarded "ktprobe bpf-load >/dev/null && sleep 4 && cat $P/stats"
g acked-copy "ktprobe guard-reader --seconds 14 --copy >/tmp/r1 & sleep 1
  ktprobe bpf-load --insns 8 | cut -c1-400
  insmod /lib/kthost-test/dummy.ko && rmmod dummy
  wait; cat /tmp/r1; cat $P/stats" 90
g timeout "ktprobe guard-reader --seconds 8 --no-ack >/tmp/r2 & sleep 1
  ktprobe bpf-load >/dev/null; wait; cat /tmp/r2; cat $P/stats $P/misses" 60
g late-ack "echo 100 >$P/hold_ms; ktprobe guard-reader --seconds 8 --delay-ms 300 >/tmp/r3 & sleep 1
  ktprobe bpf-load >/dev/null; wait; cat /tmp/r3; cat $P/stats; echo 200 >$P/hold_ms" 60
T=/sys/kernel/tracing/instances/ktg
g ftrace-trampoline "ktprobe guard-reader --seconds 20 --copy >/tmp/r4 & sleep 1
  mkdir $T; echo do_sys_openat2 >$T/set_ftrace_filter
  echo function >$T/current_tracer; sleep 1; echo nop >$T/current_tracer; rmdir $T
  wait; cat /tmp/r4; cat $P/stats" 90
g kprobe-slot "ktprobe guard-reader --seconds 12 --copy >/tmp/r5 & sleep 1
  echo 'p:ktg do_sys_openat2+5' >>/sys/kernel/tracing/kprobe_events; sleep 2
  echo '-:ktg' >>/sys/kernel/tracing/kprobe_events
  wait; cat /tmp/r5; cat $P/stats" 60
g unload "rmmod ktguard; dmesg | grep ktguard | tail -60; dmesg | grep -iE 'ktguard|WARNING|BUG|Oops' | tail -20"
