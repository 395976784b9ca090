#!/bin/sh
# The guest installer, run against an image root: every file lands where a
# systemd Debian guest expects it, and the unit is enabled.
set -eu
script=$1
bin=$2
root=$(mktemp -d /tmp/kthost-install-test-XXXXXX)
trap 'rm -rf "$root"' EXIT
"$script" --root "$root" "$bin"
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$root/usr/local/sbin/ktguest" ] || fail "binary not installed"
cmp -s "$bin" "$root/usr/local/sbin/ktguest" || fail "installed binary differs"
grep -q '^ExecStart=/usr/local/sbin/ktguest' "$root/etc/systemd/system/ktguest.service" || fail "unit does not run the binary"
grep -q '^WantedBy=multi-user.target' "$root/etc/systemd/system/ktguest.service" || fail "unit has no WantedBy"
[ "$(readlink "$root/etc/systemd/system/multi-user.target.wants/ktguest.service")" = /etc/systemd/system/ktguest.service ] || fail "unit not enabled"
grep -qx virtio_console "$root/etc/modules-load.d/ktguest.conf" || fail "virtio_console not loaded at boot"
# A missing binary is a clear error, not a half install.
if "$script" --root "$root" /nonexistent/ktguest 2>/dev/null; then fail "accepted a missing binary"; fi
echo "1 passed, 0 failed"
