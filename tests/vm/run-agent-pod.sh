#!/bin/bash
# kthost agent against a libvirt in a KubeVirt-shaped pod, and a live
# migration from this host's libvirtd into that pod, with real libvirtd, QEMU
# (TCG, one vCPU, the software PT plugin) and the guests' own view of their
# BPF JIT images (jited_prog_insns, written by ktprobe) as the truth:
#   1. the "pod": a second libvirtd in its own mount and pid namespaces
#      (unshare), with /run, libvirt's state and kthost's domain state on
#      private tmpfs. From the host its sockets are reached only through
#      /proc/<pid>/root, and its QEMU's thread ids are the pod's, not this
#      host's: as in a virt-launcher pod next to a node agent;
#   2. an agent on the host, connected through that /proc/<pid>/root socket,
#      traces kthost-pod1, whose RAM is anonymous as KubeVirt's is (QEMU's
#      process memory): its log says the domain runs in other namespaces;
#      `kthost exec --connect` reaches the guest the same way; the bundle
#      holds the guest's own BPF JIT bytes;
#   3. kthost-mig1 runs on this host's libvirtd, traced by a second agent
#      (qemu:///system), and loads BPF programs; then it is migrated live
#      into the pod. The host agent closes its bundle saying the domain
#      migrated away and holds those programs; the pod agent picks the domain
#      up in the pod, and its bundle holds the programs loaded after the
#      migration.
# usage: tests/vm/run-agent-pod.sh BUILD_DIR [WORK_DIR]
set -euo pipefail
BUILD=$(cd "${1:?usage: run-agent-pod.sh BUILD_DIR [WORK_DIR]}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=${2:-$BUILD/agent-pod-test}
K=$BUILD/host/cli/kthost
LV=$SRC/vm-images/libvirt/kthost-libvirt.sh
CHECK_BPF=$SRC/tests/tools/check-bpf-text.py
rm -rf "$W"
mkdir -p "$W"
say() { echo "agent pod test: $*"; }
failed=0
# shellcheck source=tests/vm/agent-lib.sh
. "$SRC/tests/vm/agent-lib.sh"
UNSHARE="" POD="" POD_AGENT="" HOST_AGENT="" POD_NEW_MOUNTS=""
in_pod() { nsenter -t "$POD" -m -p -r -w -- "$@"; }  # -r -w: its root and directory too (a chroot)
# On a failure: what libvirtd and QEMU said on both sides of the migration
# (why a domain stopped: "shutting down, reason=...", a QEMU error or signal),
# the guest's last console lines and any crash the host kernel logged. The pod's
# logs are on its tmpfs and go with it, so they are printed before it ends.
show_diagnostics() {
  local f
  say "diagnostics (a check failed):"
  [ ! -s "$W/migrate.log" ] || { echo "--- virsh migrate:"; cat "$W/migrate.log"; }
  for d in kthost-pod1 kthost-mig1; do
    echo "--- the pod's /var/log/libvirt/qemu/$d.log (tail):"
    in_pod tail -n 15 "/var/log/libvirt/qemu/$d.log" 2>/dev/null | cut -c1-400 || true
    echo "--- the pod's console of $d (tail):"
    in_pod tail -n 15 "/run/kthost/$d/console.log" 2>/dev/null | cut -c1-300 || true
  done
  echo "--- this host's /var/log/libvirt/qemu/kthost-mig1.log (tail):"
  tail -n 15 /var/log/libvirt/qemu/kthost-mig1.log 2>/dev/null | cut -c1-400 || true
  for f in "$W"/pod-agent.log "$W"/host-agent.log; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f") (tail):"; tail -n 25 "$f" | cut -c1-400
  done
  echo "--- the host kernel's log: crashes of QEMU or kthost:"
  dmesg 2>/dev/null | grep -E 'qemu|kthost' | grep -iE 'segfault|trap|killed|oom' | tail -n 10 || true
}
cleanup() {
  local rc=$? p
  for p in $POD_AGENT $HOST_AGENT; do kill -TERM "$p" 2>/dev/null || true; done
  if [ -n "$POD" ]; then
    if [ "$rc" != 0 ] || [ "$failed" != 0 ]; then show_diagnostics; fi
    for d in kthost-pod1 kthost-mig1; do
      in_pod cp "/run/kthost/$d/console.log" "$W/console-pod-$d.log" 2>/dev/null || true
    done
    kill -KILL "$POD" 2>/dev/null || true  # the pod's pid 1: the kernel ends everything in it
  fi
  [ -z "$UNSHARE" ] || wait "$UNSHARE" 2>/dev/null || true
  cp /run/kthost/kthost-mig1/console.log "$W/console-mig1.log" 2>/dev/null || true
  "$LV" undefine kthost-mig1 >/dev/null 2>&1 || true
  # In a chroot the pod's binds of its directories onto themselves reached
  # this namespace (pod-init.sh): take away those that were not mount points
  # before the pod started.
  for d in $POD_NEW_MOUNTS; do
    if mountpoint -q "$d"; then umount "$d" 2>/dev/null || say "could not unmount the pod's bind of $d here"; fi
  done
}
trap cleanup EXIT
trap 'say "stopped by a signal"; exit 130' INT TERM HUP
domain_field() { agent_domain_field "$@"; }  # SOCKET DOMAIN FIELD
wait_ready() { agent_wait_ready "$1" "$3" "$2"; }  # SOCKET DOMAIN LOG
# workload URI DOMAIN SEED FILE: BPF programs of three kinds and a module
# cycle; FILE gets the guest's JIT bytes.
workload() {
  local g=("$K" exec --connect "$1" --domain "$2" --timeout 600 --)
  "${g[@]}" "ktprobe bpf-stress --count 8 --kinds socket,xdp,fentry --seed $3 --out /tmp/bpf-$3.txt >/dev/null &&
     insmod /lib/kthost-test/dummy.ko && rmmod dummy" >/dev/null && "${g[@]}" cat "/tmp/bpf-$3.txt" >"$4"
}
stop_agent() {  # stop_agent PID: SIGTERM, and its exit status
  local rc=0
  kill -TERM "$1"
  timeout 120 tail --pid="$1" -f /dev/null || rc=$?
  wait "$1" || rc=$?
  return $rc
}

say "1. the pod: a libvirtd in its own mount and pid namespaces"
"$LV" start-daemon >/dev/null
"$LV" undefine kthost-mig1 >/dev/null 2>&1 || true
# The pod's /etc/libvirt: this host's, without its domains.
cp -a /etc/libvirt "$W/pod-etc"
rm -f "$W"/pod-etc/qemu/*.xml
rm -rf "$W/pod-etc/qemu/autostart"
mkdir -p /var/lib/kthost/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
# The directories the pod covers with its own, and which of them are mount
# points here before it starts (see pod-init.sh and cleanup).
POD_DIRS="/run /var/lib/libvirt /var/log/libvirt /var/cache/libvirt /var/lib/kthost/libvirt /etc/libvirt"
POD_NEW_MOUNTS=""
for d in $POD_DIRS; do mountpoint -q "$d" || POD_NEW_MOUNTS="$POD_NEW_MOUNTS $d"; done
# Nothing the pod mounts may reach this host's namespace. Where / is a mount
# point (a host, a container) making every mount private does that. In a
# chroot (a fresh root: / is a directory of the host's root mount, which
# cannot be named from here) the visible mounts are made private, and each
# directory the pod covers is first bound onto itself and that bind made
# private: only the bind onto itself reaches this host's namespace, and it is
# taken away again at the end. Then the pod's own /proc, for its pid
# namespace.
cat >"$W/pod-init.sh" <<EOF
#!/bin/sh
set -e
if ! mount --make-rprivate / 2>/dev/null; then
  for m in \$(awk '{ print \$5 }' /proc/self/mountinfo); do mount --make-private "\$m" 2>/dev/null || true; done
  for d in $POD_DIRS; do
    mount --bind "\$d" "\$d"
    mount --make-private "\$d"
  done
fi
mount -t proc kthost-pod-proc /proc
for d in /run /var/lib/libvirt /var/log/libvirt /var/cache/libvirt /var/lib/kthost/libvirt; do
  mount -t tmpfs kthost-pod "\$d"
done
mount --bind "$W/pod-etc" /etc/libvirt
KTHOST_LIBVIRT_HOST_UUID=6b7468ff-0d00-4000-8000-00000000f0d1 "$LV" start-daemon
echo ready >"$W/pod-ready"
exec sleep infinity
EOF
chmod +x "$W/pod-init.sh"
setsid unshare --mount --pid --fork --propagation unchanged "$W/pod-init.sh" >"$W/pod.log" 2>&1 &
UNSHARE=$!
deadline=$((SECONDS + 60))
until [ -f "$W/pod-ready" ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
[ -f "$W/pod-ready" ] || { cat "$W/pod.log"; say "the pod's libvirtd did not start"; exit 1; }
POD=$(tr -d " \n" <"/proc/$UNSHARE/task/$UNSHARE/children")
PURI="qemu+unix:///system?socket=/proc/$POD/root/run/libvirt/libvirt-sock"
say "   the pod's pid 1 is $POD here; its libvirt: $PURI"
# Anonymous RAM, as KubeVirt's memory-backend-ram: read through QEMU's process memory.
in_pod "$LV" define "$BUILD/vm-image" --name kthost-pod1 --accel tcg --vcpus 1 --mem 320 --ram none >/dev/null
in_pod "$LV" start kthost-pod1 --timeout 300 >"$W/start-pod1.log" 2>&1 || { cat "$W/start-pod1.log"; exit 1; }
check "the pod's channel sockets are not at their paths on this host" [ ! -e /run/kthost/kthost-pod1/kthost0.sock ]
check "but they are through /proc/<pod>/root" [ -S "/proc/$POD/root/run/kthost/kthost-pod1/kthost0.sock" ]
pod_tid=$(virsh -q -c "$PURI" qemu-monitor-command kthost-pod1 '{"execute":"query-cpus-fast"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["return"][0]["thread-id"])')
pod_qemu=$(in_pod cat /run/libvirt/qemu/kthost-pod1.pid)
say "   QEMU's vCPU thread is $pod_tid in the pod; QEMU is pid $pod_qemu there"
check "the vCPU thread's id in the pod is not a thread of QEMU here" \
  bash -c "[ \"\$(awk '/^Tgid:/{print \$2}' /proc/$pod_tid/status 2>/dev/null)\" != \"\$(pgrep -f 'guest=kthost-pod1' | head -1)\" ]"

say "2. an agent on the host traces kthost-pod1 through /proc/$POD/root"
"$K" agent --connect "$PURI" --output "$W/out-pod" --socket "$W/pod-agent.sock" \
  --match 'kthost-pod1,kthost-mig1' >"$W/pod-agent.log" 2>&1 &
POD_AGENT=$!
wait_ready "$W/pod-agent.sock" kthost-pod1 "$W/pod-agent.log"
"$K" agent --status --socket "$W/pod-agent.sock"
check "the agent's log says kthost-pod1 runs in other namespaces, and how it is reached" \
  grep -q "domain kthost-pod1: domain 'kthost-pod1' runs in other namespaces than kthost .*files are read through /proc/[0-9]*/root" \
  "$W/pod-agent.log"
check "kthost-pod1 (anonymous RAM) is read through QEMU's process memory" \
  [ "$(domain_field "$W/pod-agent.sock" kthost-pod1 memory_backend)" = process ]
check "kthost-pod1 has software PT" [ "$(domain_field "$W/pod-agent.sock" kthost-pod1 pt_source)" = software ]
workload "$PURI" kthost-pod1 71 "$W/pod1-bpf.txt" || { say "the pod workload failed"; exit 1; }
pod1_bundle=$(domain_field "$W/pod-agent.sock" kthost-pod1 bundle)
holds=$(domain_field "$W/pod-agent.sock" kthost-pod1 holds)
say "   bundle $pod1_bundle, holds $holds"
check "kthost-pod1's unloads were held and answered (holds > 0)" [ "${holds:-0}" -gt 0 ]

say "3. kthost-mig1 on this host's libvirtd, traced, then migrated live into the pod"
"$LV" define "$BUILD/vm-image" --name kthost-mig1 --accel tcg --vcpus 1 --mem 320 >/dev/null
"$LV" start kthost-mig1 --timeout 300 >"$W/start-mig1.log" 2>&1 || { cat "$W/start-mig1.log"; exit 1; }
"$K" agent --output "$W/out-host" --socket "$W/host-agent.sock" --match 'kthost-mig1' >"$W/host-agent.log" 2>&1 &
HOST_AGENT=$!
wait_ready "$W/host-agent.sock" kthost-mig1 "$W/host-agent.log"
workload qemu:///system kthost-mig1 81 "$W/mig1-bpf1.txt" || { say "the workload before the migration failed"; exit 1; }
host_bundle=$(domain_field "$W/host-agent.sock" kthost-mig1 bundle)
# What the destination QEMU's XML names must exist in the pod.
in_pod mkdir -p /run/kthost/kthost-mig1 /var/lib/kthost/libvirt/kthost-mig1-pt
t0=$SECONDS
virsh -c qemu:///system migrate --live --unsafe kthost-mig1 "$PURI" --migrateuri tcp://127.0.0.1:49252 \
  >"$W/migrate.log" 2>&1 || { cat "$W/migrate.log"; say "virsh migrate failed"; exit 1; }
say "   migrated in $((SECONDS - t0)) s"
check "kthost-mig1 runs in the pod now" [ "$(virsh -q -c "$PURI" domstate kthost-mig1)" = running ]
deadline=$((SECONDS + 60))
until [ -f "$host_bundle/summary.json" ] || [ $SECONDS -ge $deadline ]; do sleep 1; done
check "the host agent closed its bundle, saying the domain migrated away" grep -q "migrated away" "$host_bundle/summary.json"
wait_ready "$W/pod-agent.sock" kthost-mig1 "$W/pod-agent.log"
check "kthost-mig1 (memfd RAM) is read in the pod through the shared mapping" \
  [ "$(domain_field "$W/pod-agent.sock" kthost-mig1 memory_backend)" = mmap ]
workload "$PURI" kthost-mig1 82 "$W/mig1-bpf2.txt" || { say "the workload after the migration failed"; exit 1; }
pod_mig_bundle=$(domain_field "$W/pod-agent.sock" kthost-mig1 bundle)
say "   before: $host_bundle; after: $pod_mig_bundle"

say "4. both agents stopped (SIGTERM), bundles checked against each guest's own JIT bytes"
rc=0; stop_agent "$POD_AGENT" || rc=$?; POD_AGENT=""
check "the pod agent exited 0" [ "$rc" = 0 ]
rc=0; stop_agent "$HOST_AGENT" || rc=$?; HOST_AGENT=""
check "the host agent exited 0" [ "$rc" = 0 ]
tail -n 5 "$W/pod-agent.log" "$W/host-agent.log"
check "kthost-pod1's bundle: its 8 programs" "$CHECK_BPF" "$pod1_bundle" "$W/pod1-bpf.txt"
check "kthost-mig1 before the migration (host agent): its 8 programs" "$CHECK_BPF" "$host_bundle" "$W/mig1-bpf1.txt"
check "kthost-mig1 after the migration (pod agent): its 8 new programs" "$CHECK_BPF" "$pod_mig_bundle" "$W/mig1-bpf2.txt"
check "kthost-pod1's bundle reads back (kthost report)" bash -c "'$K' report '$pod1_bundle' --json --quiet >'$W/pod1-report.json'"
# The plugin in the pod cannot see the host agent's pid: PT stays on there only
# through the trigger's heartbeat (a pid trigger named a process it cannot see: it
# removed the trigger at its first poll, and CI saw PT never confirmed).
check "kthost-pod1's bundle holds decoded PT (the heartbeat trigger kept PT on in the pod)" \
  python3 -c "import json,sys; n=json.load(open(sys.argv[1]))['insns']; print('      instructions:', n); sys.exit(n == 0)" \
  "$W/pod1-report.json"
if [ "$failed" = 0 ]; then say "all checks passed"; else say "some checks FAILED"; exit 1; fi
