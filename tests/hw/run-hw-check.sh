#!/bin/sh
# The hardware PT check, for the few minutes a machine with KVM and Intel PT
# may be lent: one script, no interaction, under 8 minutes. It
#   1. runs `kthost doctor --json` and `kthost accel --json`;
#   2. where KVM and intel_pt are usable, boots the test image under KVM and
#      runs `kthost trace --pt hardware -- WORKLOAD`: BPF programs loaded and
#      unloaded, a module loaded and unloaded, a static key toggled, syscalls;
#   3. decodes the bundle with `kthost report`;
#   4. checks the bundle's BPF text against the guest kernel's own JIT bytes
#      (tests/tools/check-bpf-text.py);
# and writes everything (doctor, accel, summary.json, report JSON and text,
# logs, result.json) to OUT. Where there is no PT it stops after step 1 with
# "no PT here" and exits 0; a failed step exits 1.
#
# --rehearse runs steps 2-4 under TCG with the software PT plugin (a stand-in
# for the hardware, named as such in result.json), so the script itself is
# tested on machines without PT.
#
# usage: tests/hw/run-hw-check.sh [--rehearse] [BUILD_DIR] [OUT_DIR]
set -u
REHEARSE=0
[ "${1:-}" = --rehearse ] && { REHEARSE=1; shift; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd) || exit 2
OUT=${2:-$PWD/hw-check-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
K=$BUILD/host/cli/kthost
KTVM=$SRC/vm-images/ktvm
STATE=$OUT/vm
START=$(date +%s)
say() { echo "hw-check: $*" | tee -a "$OUT/steps.log"; }
result() {  # STATUS MESSAGE
  python3 - "$OUT" "$1" "$2" "$REHEARSE" "$(( $(date +%s) - START ))" <<'PY'
import json, os, sys
out, status, message, rehearse, seconds = sys.argv[1:6]
doc = {"status": status, "message": message, "seconds": int(seconds),
       "pt": "software (rehearsal: a stand-in for hardware)" if rehearse == "1" else "hardware"}
for name in ("doctor", "accel", "bpf-check"):
    try:
        doc[name] = json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        pass
try:
    s = json.load(open(os.path.join(out, "bundle", "summary.json")))
    doc["trace"] = {k: s.get(k) for k in ("pt_source", "pt_bytes", "holds", "holds_failed", "lost_total", "pt_aux", "kvm_tsc")}
    r = json.load(open(os.path.join(out, "report.json")))
    doc["report"] = {"insns": r.get("insns"), "errors": r.get("errors", {}).get("counts", r.get("errors"))}
except (OSError, ValueError):
    pass
json.dump(doc, open(os.path.join(out, "result.json"), "w"), indent=2)
PY
  say "$2 (everything is in $OUT)"
}
stop_vm() { [ -f "$STATE/vm.json" ] && timeout 30 "$KTVM" stop --vm "$STATE/vm.json" >/dev/null 2>&1; }
trap stop_vm EXIT INT TERM
: >"$OUT/steps.log"

[ -x "$K" ] || { result error "no kthost binary at $K (build first: scripts/build.sh)"; exit 1; }
say "1. kthost doctor"
timeout 30 "$K" doctor --json >"$OUT/doctor.json" 2>"$OUT/doctor.err"
timeout 30 "$K" doctor >"$OUT/doctor.txt" 2>&1
timeout 30 "$K" accel --json >"$OUT/accel.json" 2>&1
cat "$OUT/doctor.txt"
hw=$(python3 -c 'import json,sys; print(1 if json.load(open(sys.argv[1])).get("hardware_pt") else 0)' "$OUT/doctor.json" 2>/dev/null || echo 0)
if [ "$hw" != 1 ] && [ $REHEARSE = 0 ]; then
  why=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("; ".join(c["name"]+": "+c["detail"] for c in d["checks"] if not c["ok"] and c["name"] != "qemu-system-x86_64"))' "$OUT/doctor.json" 2>/dev/null)
  result no-pt "no PT here: $why"
  exit 0
fi

if [ $REHEARSE = 1 ]; then
  accel="--accel tcg --plugin $BUILD/pt-plugin/ktpt.so,out=$OUT/pt,trigger=$OUT/pt-on"; pt=software
else
  accel="--accel kvm"; pt=hardware
fi
say "2. boot the test image ($pt PT)"
# shellcheck disable=SC2086
timeout 200 "$KTVM" start --image "$BUILD/vm-image" --state-dir "$STATE" --name hwcheck --smp 2 --mem 1G \
  --boot-timeout 150 $accel >"$OUT/boot.log" 2>&1 || { cat "$OUT/boot.log"; result error "the guest did not boot"; exit 1; }
say "   kthost trace --pt $pt -- WORKLOAD"
timeout 240 "$K" trace --vm "$STATE/vm.json" --pt $pt -o "$OUT/bundle" --timeout 180 -- \
  'i=0; while [ $i -lt 20 ]; do cat /proc/uptime >/dev/null; ls /proc >/dev/null; i=$((i+1)); done;
   ktprobe bpf-stress --count 20 --kinds socket,xdp --out /tmp/bpf.txt &&
   for i in 1 2 3; do insmod /lib/kthost-test/dummy.ko && rmmod dummy || exit 1; done &&
   echo 1 >/proc/sys/kernel/sched_schedstats && echo 0 >/proc/sys/kernel/sched_schedstats' \
  >"$OUT/workload.out" 2>"$OUT/trace.log"
rc=$?
tail -n 3 "$OUT/trace.log"
[ $rc -eq 0 ] || { result error "kthost trace -- WORKLOAD exited $rc (trace.log)"; exit 1; }
timeout 30 "$K" exec --vm "$STATE/vm.json" -- cat /tmp/bpf.txt >"$OUT/bpf.txt" 2>&1
stop_vm

say "3. kthost report"
timeout 180 "$K" report "$OUT/bundle" --json --top 1000000 --quiet >"$OUT/report.json" 2>"$OUT/report.err" ||
  { result error "kthost report failed (report.err)"; exit 1; }
timeout 180 "$K" report "$OUT/bundle" --top 25 >"$OUT/report.txt" 2>&1
head -n 12 "$OUT/report.txt"

say "4. BPF text against the guest's JIT bytes"
"$SRC/tests/tools/check-bpf-text.py" "$OUT/bundle" "$OUT/bpf.txt" --json >"$OUT/bpf-check.json"
rc=$?
cat "$OUT/bpf-check.json"
[ $rc -eq 0 ] || { result fail "BPF text differs from the guest's JIT bytes"; exit 1; }
result ok "$pt PT traced, decoded and checked"
exit 0
