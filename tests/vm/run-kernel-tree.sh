#!/bin/bash
# A kernel from a build tree, as a CI job that builds kernels has it, end to
# end:
#   1. vm-images/build-kernel-tree.sh builds Debian's kernel source with a
#      small config (cached: rebuilt only when the source or config changes);
#   2. ktguard is built against that tree (guest-kit/ktguard/build.sh --kdir);
#   3. the test image takes the tree's bzImage and modules
#      (vm-images/build-image.sh --kernel-tree);
#   4. the guest boots it under TCG with the software PT plugin and
#      tsc=unstable: uname -r is the tree's release, ktguard is loaded with
#      every hook attached, and the guest's perf clock is not its TSC (as on
#      a guest whose TSC failed a check; CI once met that by chance), so
#      kthost trace must estimate the clock from arrival times;
#   5. `kthost trace` over BPF programs, a module cycle and syscalls, then
#      `kthost report --vmlinux TREE/vmlinux --json`;
#   6. checks against what shares no code with kthost: the bundle's clock was
#      estimated (manifest source host_arrival), the bundle's BPF text
#      equals the guest kernel's JIT bytes (check-bpf-text.py), the symbols
#      equal the guest's /proc/kallsyms and every BPF program that ran is
#      decoded at its address (check-symbols.py), and every source
#      line the report gives equals LLVM's llvm-addr2line on the tree's vmlinux
#      (check-source-lines.py); zero guard misses;
#   7. scripts/kthost-ci.sh given the tree itself as its base kernel (it
#      builds ktguard and an image from the tree) against step 3's image, 2
#      runs each: the image it built runs the tree's release with ktguard on,
#      the runs are clean (no desync or missing text, no run over the limits)
#      and the exit status is 0 or 1 (check-regression.py kernels).
#
# usage: tests/vm/run-kernel-tree.sh BUILD_DIR [--tree DIR] [--keep DIR]
#   --tree DIR  where the kernel tree is built or found
#               (default /var/cache/kthost/kernel-tree)
set -euo pipefail
BUILD=$(cd "${1:?usage: run-kernel-tree.sh BUILD_DIR [--tree DIR] [--keep DIR]}" && pwd)
shift
TREE=/var/cache/kthost/kernel-tree KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tree) TREE=${2:?}; shift 2 ;;
    --keep) KEEP=${2:?}; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
SRC=$(cd "$(dirname "$0")/../.." && pwd)
K=$BUILD/host/cli/kthost
WORK=${KEEP:-$(mktemp -d /tmp/kthost-tree-XXXXXX)}
mkdir -p "$WORK"
STATE=$WORK/vm
say() { echo "kernel tree: $*"; }
fail() { say "FAIL  $*"; exit 1; }
cleanup() {
  [ -f "$STATE/vm.json" ] && "$SRC/vm-images/ktvm" stop --vm "$STATE/vm.json" >/dev/null 2>&1 || true
  [ -n "$KEEP" ] || rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
g() { "$K" exec --vm "$STATE/vm.json" --timeout 600 -- "$@"; }

say "1. the kernel build tree ($TREE)"
t0=$(date +%s)
"$SRC/vm-images/build-kernel-tree.sh" "$TREE" | sed 's/^/   /'
release=$(cat "$TREE/include/config/kernel.release")
say "   $release ($(( $(date +%s) - t0 )) s)"

say "2. ktguard against the tree"
"$SRC/guest-kit/ktguard/build.sh" "$WORK/ktguard" --kdir "$TREE" >"$WORK/ktguard.log" 2>&1 ||
  { tail -n 20 "$WORK/ktguard.log"; fail "ktguard did not build against $TREE"; }
modinfo_vermagic=$(modinfo -F vermagic "$WORK/ktguard/ktguard.ko")
case "$modinfo_vermagic" in "$release "*) ;; *) fail "ktguard.ko's vermagic '$modinfo_vermagic' is not $release" ;; esac

say "3. the test image from the tree"
"$SRC/vm-images/build-image.sh" "$WORK/image" --kernel-tree "$TREE" --guest-kit "$BUILD/guest-kit" \
  --cache "$BUILD/vm-image-cache" --ktguard "$WORK/ktguard/ktguard.ko" >"$WORK/image.log" 2>&1 ||
  { tail -n 20 "$WORK/image.log"; fail "the image did not build"; }

say "4. boot under TCG with the software PT plugin"
"$SRC/vm-images/ktvm" start --image "$WORK/image" --state-dir "$STATE" --name kthost-tree --accel tcg --smp 2 \
  --boot-timeout 300 --append tsc=unstable \
  --plugin "$BUILD/pt-plugin/ktpt.so,out=$WORK/pt,trigger=$WORK/pt-on" >"$WORK/boot.log" 2>&1 ||
  { tail -n 20 "$WORK/boot.log" "$STATE/console.log" 2>/dev/null; fail "the guest did not boot"; }
running=$(g uname -r)
[ "$running" = "$release" ] || fail "the guest runs '$running', not the tree's $release"
hooks=$(g cat /sys/module/ktguard/parameters/hooks) || fail "ktguard is not loaded in the guest"
echo "$hooks" | sed 's/^/   hook: /'
! echo "$hooks" | grep -q ' none$' || fail "ktguard left a path unhooked on the tree's kernel"
say "   the guest runs $running, ktguard loaded"

say "5. kthost trace, then kthost report --vmlinux"
"$K" trace --vm "$STATE/vm.json" -o "$WORK/bundle" -- 'i=0; while [ $i -lt 10 ]; do cat /proc/uptime >/dev/null; ls /proc >/dev/null; i=$((i+1)); done;
   ktprobe bpf-stress --count 20 --kinds socket,xdp,fentry --calls 200 --out /tmp/bpf.txt >/tmp/bpf.json &&
   insmod /lib/kthost-test/dummy.ko && rmmod dummy' >"$WORK/trace.out" 2>"$WORK/trace.log" ||
  { cat "$WORK/trace.log" >&2; fail "kthost trace failed"; }
grep -v '^$' "$WORK/trace.log" | tail -n 1 | sed 's/^/   /'
g cat /tmp/bpf.txt >"$WORK/bpf.txt"
g cat /proc/kallsyms >"$WORK/guest-kallsyms"
"$K" report "$WORK/bundle" --vmlinux "$TREE/vmlinux" --top 10 --quiet | sed 's/^/   /'
"$K" report "$WORK/bundle" --vmlinux "$TREE/vmlinux" --json --top 1000000 --quiet >"$WORK/report.json"

say "6. checks"
python3 - "$WORK/bundle/manifest.json" <<'EOF' || fail "the bundle's clock"
import json, sys
c = json.load(open(sys.argv[1]))["clock"]["perf_to_tsc"]
ok = isinstance(c, dict) and c.get("source") == "host_arrival"
print(("ok    " if ok else "FAIL  ") + f"the guest's perf clock is not its TSC (tsc=unstable): the bundle clock is estimated ({c})")
sys.exit(0 if ok else 1)
EOF
python3 - "$WORK/bundle/summary.json" <<'EOF' || fail "the trace lost holds"
import json, sys
s = json.load(open(sys.argv[1]))
print("   holds %d, guard misses %d, unheld paths %d" % (s["holds"], s["lost_guard_miss"], len(s.get("guard_unheld", []))))
sys.exit(0 if s["holds"] > 0 and s["lost_guard_miss"] == 0 and not s.get("guard_unheld") else 1)
EOF
"$SRC/tests/tools/check-bpf-text.py" "$WORK/bundle" "$WORK/bpf.txt" || fail "BPF text"
"$SRC/tests/tools/check-symbols.py" "$WORK/bundle" "$WORK/report.json" "$WORK/guest-kallsyms" "$WORK/bpf.txt" ||
  fail "symbols"
"$SRC/tests/tools/check-source-lines.py" "$TREE/vmlinux" "$WORK/report.json" || fail "source lines"

say "7. kthost-ci.sh --base TREE --new (step 3's image), 2 runs each"
"$SRC/vm-images/ktvm" stop --vm "$STATE/vm.json" >/dev/null 2>&1 || true
set +e
"$SRC/scripts/kthost-ci.sh" --build "$BUILD" --base "$TREE" --new "$WORK/image" --runs 2 \
  --workload "$SRC/tests/vm/ktregress/syscalls.sh" --out "$WORK/ci" >"$WORK/ci.md" 2>"$WORK/ci.log"
status=$?
set -e
grep 'kthost-ci: time' "$WORK/ci.log" | sed 's/^/   /'
[ "$status" -le 1 ] || { tail -n 20 "$WORK/ci.log"; fail "kthost-ci.sh failed (status $status)"; }
built=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['kernel_release'])" "$WORK/ci/base/image/manifest.json")
[ "$built" = "$release" ] || fail "kthost-ci.sh built an image of '$built', not the tree's $release"
for r in "$WORK"/ci/base/run-*/summary.json; do
  guard=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['guest_guard'])" "$r")
  [ "$guard" = on ] || fail "$r: the guest's guard is '$guard', not on (ktguard for the tree)"
done
say "   kthost-ci.sh built an image of $built with ktguard, status $status"
python3 "$SRC/tests/tools/check-regression.py" kernels "$WORK/ci" "$status" || fail "kthost-ci.sh on the tree"
say "all checks passed on $release"
