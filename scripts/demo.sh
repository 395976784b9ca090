#!/bin/sh
# The main job on the bundled test VM: build, boot the guest under QEMU (KVM
# if usable, else TCG), run a workload in it, and show what kthost reads from
# guest RAM: kernel release, KASLR base, paging mode, text ranges and sizes,
# and a kcore-style snapshot.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build}
"$src/scripts/install-deps.sh"
"$src/scripts/build.sh" "$build"
state=$(mktemp -d /tmp/kthost-demo-XXXXXX)
trap '"$src/vm-images/ktvm" stop --vm "$state/vm.json" >/dev/null 2>&1 || true' EXIT INT TERM
echo "== booting the test VM"
"$src/vm-images/ktvm" start --image "$build/vm-image" --state-dir "$state" --name demo
kthost="$build/host/cli/kthost"
echo "== workload in the guest: load a BPF program and a module, toggle a static key; kthost events shows what ktguest reports"
"$kthost" events --vm "$state/vm.json" --duration 12 | grep -v '^\(text_poke\|heartbeat\)' &
events=$!
sleep 2
"$kthost" exec --vm "$state/vm.json" -- 'ktprobe bpf-load --name demo_once >/dev/null; insmod /lib/kthost-test/dummy.ko && ktprobe bpf-load --name demo --hold 600 >/tmp/bpf.json & sleep 1; T=/sys/kernel/tracing; echo 1 > $T/events/sched/sched_switch/enable; echo 0 > $T/events/sched/sched_switch/enable; uname -a; lsmod'
wait $events || true
echo "== kthost snapshot"
"$kthost" snapshot --vm "$state/vm.json" -o "$state/snapshot"
echo "== objdump of the snapshot at __x64_sys_getpid"
addr=$(grep -w __x64_sys_getpid "$state/snapshot/kallsyms" | cut -d' ' -f1)
stop=$(python3 -c "print(hex(0x$addr + 32))")
objdump -d --start-address=0x$addr --stop-address=$stop "$state/snapshot/kcore" | tail -n +7
echo "== done; snapshot in $state/snapshot"
