#!/bin/sh
# Installs ktguest into a normal systemd Debian guest:
#   /usr/local/sbin/ktguest and /etc/systemd/system/ktguest.service, enabled
#   and started.
# usage: install-ktguest.sh [KTGUEST_BINARY]   (default: ./ktguest beside this script)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$HERE/ktguest}
[ "$(id -u)" = 0 ] || { echo "install-ktguest: run as root" >&2; exit 1; }
[ -x "$BIN" ] || { echo "install-ktguest: $BIN is missing or not executable" >&2; exit 1; }
[ -f "$HERE/ktguest.service" ] || { echo "install-ktguest: ktguest.service not found beside this script" >&2; exit 1; }
install -D -m 755 "$BIN" /usr/local/sbin/ktguest
install -D -m 644 "$HERE/ktguest.service" /etc/systemd/system/ktguest.service
# The port shows up only with virtio_console; load it now and at every boot.
modprobe virtio_console 2>/dev/null || true
echo virtio_console >/etc/modules-load.d/ktguest.conf
systemctl daemon-reload
systemctl enable --now ktguest.service
echo "install-ktguest: ktguest installed and started; logs: journalctl -u ktguest"
