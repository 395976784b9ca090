#!/bin/bash
# The guest kit as a real image installs it: Debian packages in a systemd
# disk image, traced under libvirt, then a kernel upgrade inside the image.
#   1. guest-kit/debian/build-debs.sh: ktguest, ktguard-dkms and
#      kthost-test-agent, with no lintian error;
#   2. vm-images/build-disk-image.sh: a Debian 12 qcow2 with systemd, GRUB,
#      the generic kernel ABI before the archive's default one and its
#      headers, the three packages installed by apt; the default ABI's
#      packages staged inside for an upgrade;
#   3. the domain (kthost-libvirt.sh define --disk, over a throwaway qcow2
#      overlay) boots from its own disk, and in the guest, as the guest sees
#      it: systemd runs ktguest; DKMS built ktguard for the running kernel
#      and it is loaded; `kthost trace --domain` over BPF programs and a module
#      cycle gives a bundle whose BPF text equals the guest's own JIT bytes
#      (tests/tools/check-bpf-text.py);
#   4. the kernel upgrade (left out with --no-upgrade): dpkg installs the
#      staged kernel and headers; DKMS builds ktguard for the new kernel at
#      install; reboot in place (GRUB boots the newest kernel); then the new
#      kernel runs, ktguard is loaded for it, ktguest runs, and the trace and
#      BPF check pass again.
# Prints one line per check; exits 1 at the first that fails. CTest's
# vm_DiskImage runs all four steps: about 13 minutes on a quiet 2-core host,
# 8 of them the upgrade (unpacking, DKMS's compile, depmod, the initramfs and
# GRUB's menu all run inside the TCG guest).
#
# usage: tests/vm/run-disk-image.sh BUILD_DIR [--no-upgrade] [--keep DIR]
set -euo pipefail
BUILD=$(cd "${1:?usage: run-disk-image.sh BUILD_DIR [--no-upgrade] [--keep DIR]}" && pwd)
shift
KEEP="" UPGRADE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --upgrade) UPGRADE=1; shift ;;  # the default; kept for older command lines
    --no-upgrade) UPGRADE=0; shift ;;
    --keep) KEEP=${2:?--keep needs a directory}; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
SRC=$(cd "$(dirname "$0")/../.." && pwd)
K=$BUILD/host/cli/kthost
LV=$SRC/vm-images/libvirt/kthost-libvirt.sh
NAME=kthost-disk
WORK=${KEEP:-$(mktemp -d /tmp/kthost-disk-XXXXXX)}
mkdir -p "$WORK"
say() { echo "disk image: $*"; }
fail() { say "FAIL  $*"; exit 1; }
ok() { say "ok    $*"; }
cleanup() {
  "$LV" undefine "$NAME" >/dev/null 2>&1 || true
  [ -n "$KEEP" ] || rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
g() { "$K" exec --domain "$NAME" --timeout 900 -- "$@"; }

say "1. the guest kit's Debian packages"
"$SRC/guest-kit/debian/build-debs.sh" "$BUILD/debs" || fail "the packages did not build, or lintian found errors"
ok "ktguest, ktguard-dkms, kthost-test-agent $(cat "$BUILD/debs/version"), no lintian error"

# The kernels: the generic ABI before the default one in the image, the
# default one staged for the upgrade (both chosen now, from the archive).
abi_of() { apt-cache depends "linux-image-$1" 2>/dev/null | sed -n "s/^ *Depends: linux-image-\(.*-$1\)\$/\1/p" | head -n1; }
[ -n "$(abi_of amd64)" ] || apt-get update -qq
new=$(abi_of amd64)
old=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' | cut -d' ' -f1 |
  sed 's/^linux-image-//' | sort -rV | awk -v d="$new" '$0 != d { print; exit }')
[ -n "$new" ] && [ -n "$old" ] || fail "the archive has no two generic kernel ABIs"

say "2. the disk image: kernel $old, $new staged for the upgrade"
"$SRC/vm-images/build-disk-image.sh" "$BUILD/disk-image" --debs "$BUILD/debs" --kernel "$old" --stage-kernel "$new" ||
  fail "the disk image did not build"
ok "$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(len(m["packages"]), "packages, kernel", m["kernel"], "guest kit", m["guest_kit"])' "$BUILD/disk-image/manifest.json")"
disk=$WORK/run.qcow2
qemu-img create -q -f qcow2 -b "$BUILD/disk-image/disk.qcow2" -F qcow2 "$disk" || fail "qemu-img create of the overlay"

say "3. boot from the disk under libvirt (TCG, software PT plugin)"
"$LV" start-daemon >/dev/null
"$LV" undefine "$NAME" >/dev/null 2>&1 || true
mkdir -p "$WORK/pt"
"$LV" define --disk "$disk" --name "$NAME" --accel tcg --mem 1024 \
  --plugin "$BUILD/pt-plugin/ktpt.so,out=$WORK/pt,trigger=$WORK/pt-on" >/dev/null
console=/run/kthost/$NAME/console.log
"$LV" start "$NAME" --timeout 600 >/dev/null || fail "the domain did not boot to KTHOST-READY"

# One boot's checks, as the guest sees them. $1: the kernel it must run.
check_guest() {
  local want=$1 release
  release=$(g uname -r | tr -d '\r\n')
  [ "$release" = "$want" ] || fail "the guest runs $release, not $want"
  ok "the guest runs $release, from its own disk"
  [ "$(g systemctl is-active ktguest.service | tr -d '\r\n')" = active ] || { g systemctl status ktguest.service || true; fail "systemd does not run ktguest"; }
  ok "systemd runs ktguest ($(g systemctl show -p MainPID --value ktguest.service | tr -d '\r\n'))"
  g dkms status ktguard >"$WORK/dkms-$want.txt" || true
  grep -q "ktguard/.*, $want, x86_64: installed" "$WORK/dkms-$want.txt" ||
    { cat "$WORK/dkms-$want.txt"; fail "DKMS has no installed ktguard for $want"; }
  ok "DKMS: $(grep ", $want," "$WORK/dkms-$want.txt")"
  g 'test -d /sys/module/ktguard && modinfo -F filename ktguard && modinfo -F vermagic ktguard' >"$WORK/ktguard-$want.txt" ||
    fail "ktguard is not loaded"
  grep -q "^/lib/modules/$want/updates/dkms/ktguard.ko" "$WORK/ktguard-$want.txt" && grep -q "^$want " "$WORK/ktguard-$want.txt" ||
    { cat "$WORK/ktguard-$want.txt"; fail "the loaded ktguard is not DKMS's build for $want"; }
  ok "ktguard loaded at boot (modules-load.d), built by DKMS for $want"
}

# A trace over BPF programs and a module cycle; the bundle's BPF text must
# equal the JIT bytes the guest kernel reports (jited_prog_insns).
check_trace() {
  local tag=$1 bundle=$WORK/bundle-$1 rc
  set +e
  "$K" trace --domain "$NAME" -o "$bundle" -- \
    'ktprobe bpf-stress --count 20 --kinds socket,xdp,fentry --out /tmp/bpf.txt >/tmp/bpf.json &&
     for i in 1 2; do modprobe dummy && rmmod dummy || exit 1; done && cat /tmp/bpf.json' \
    >"$WORK/workload-$tag.out" 2>"$WORK/trace-$tag.log"
  rc=$?
  set -e
  [ $rc -eq 0 ] || { cat "$WORK/trace-$tag.log" "$WORK/workload-$tag.out"; fail "kthost trace -- WORKLOAD exited $rc"; }
  grep -v '^$' "$WORK/trace-$tag.log" | tail -n 1
  # The guard answered from the packaged ktguard: the guest said it is on,
  # and every unload was held (the BPF programs and the module at least).
  python3 - "$bundle/summary.json" "$tag" <<'PY' || fail "the guard in the trace ($tag)"
import json, sys
s = json.load(open(sys.argv[1]))
print(f"disk image:       guest guard {s.get('guest_guard')}, holds {s.get('holds')}, lost {s.get('lost_total')}")
sys.exit(0 if s.get("guest_guard") == "on" and s.get("holds", 0) >= 20 else 1)
PY
  g cat /tmp/bpf.txt >"$WORK/bpf-$tag.txt"
  "$SRC/tests/tools/check-bpf-text.py" "$bundle" "$WORK/bpf-$tag.txt" || fail "BPF text ($tag)"
  ok "kthost trace --domain: the bundle's BPF text equals the guest's JIT bytes ($tag)"
  "$K" report "$bundle" --top 5 --quiet >"$WORK/report-$tag.txt" || fail "kthost report ($tag)"
}

check_guest "$old"
check_trace "$old"
if [ "$UPGRADE" = 0 ]; then
  say "all checks passed (the kernel upgrade was left out: --no-upgrade)"
  exit 0
fi

say "4. kernel upgrade inside the image: $new"
g 'ls /var/lib/kthost/kernels/*.deb' | sed 's/^/disk image:       /'
# Unpacking, DKMS's compile, depmod and the initramfs all run in the TCG
# guest: over ten minutes, more on a busy host.
# In two steps, each timed: unpacking the files, then configuring them
# (DKMS's build, depmod, the initramfs, GRUB's menu).
t0=$(date +%s)
"$K" exec --domain "$NAME" --timeout 2400 -- 'DEBIAN_FRONTEND=noninteractive dpkg --unpack /var/lib/kthost/kernels/*.deb' \
  >"$WORK/upgrade.log" 2>&1 || { tail -30 "$WORK/upgrade.log"; fail "dpkg --unpack of the staged kernel (or its 2400 s limit)"; }
t1=$(date +%s)
"$K" exec --domain "$NAME" --timeout 2400 -- 'DEBIAN_FRONTEND=noninteractive dpkg --configure --pending' \
  >>"$WORK/upgrade.log" 2>&1 || { tail -30 "$WORK/upgrade.log"; fail "dpkg --configure of the staged kernel (or its 2400 s limit)"; }
t2=$(date +%s)
say "      unpacked in $((t1 - t0)) s, configured in $((t2 - t1)) s"
g 'tail -n 80 /var/log/dpkg.log' >"$WORK/dpkg.log" 2>&1 || true
grep -i 'dkms\|ktguard' "$WORK/upgrade.log" | tail -n 3 | sed 's/^/disk image:       /'
g test -f "/lib/modules/$new/updates/dkms/ktguard.ko" || { tail -30 "$WORK/upgrade.log"; fail "DKMS did not build ktguard for $new at install"; }
dkms_time=$(g "sed -n 's/^# elapsed time: *//p' /var/lib/dkms/ktguard/*/$new/x86_64/log/make.log" 2>/dev/null | tr -d '\r' | tail -n 1 || true)
ok "DKMS built ktguard for $new when the kernel was installed${dkms_time:+ (its make took $dkms_time)}"
g grep -q "vmlinuz-$new" /boot/grub/grub.cfg || fail "update-grub did not add $new"
readies=$(grep -a -c 'KTHOST-READY release=' "$console" || true)
g '(sleep 1; systemctl reboot) >/dev/null 2>&1 &' || true
deadline=$(( $(date +%s) + 600 ))
until [ "$(grep -a -c 'KTHOST-READY release=' "$console" || true)" -gt "$readies" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || { tail -30 "$console"; fail "no KTHOST-READY within 600 s of the reboot"; }
  sleep 1
done
ok "rebooted in place: $(grep -a -o 'KTHOST-READY release=[^ ]*' "$console" | tail -n 1 | tr -d '\r')"
check_guest "$new"
check_trace "$new"
say "all checks passed"
