#!/bin/sh
# Installs ktguest into a Debian guest that runs systemd:
#   /usr/local/sbin/ktguest, /etc/systemd/system/ktguest.service (enabled),
#   and virtio_console in /etc/modules-load.d so the port appears at boot.
#
# usage: install-ktguest.sh [--root DIR] [KTGUEST_BINARY]
#   On a running guest (no --root): installs, then enables and starts the unit.
#   With --root DIR (an image being built, mounted at DIR): installs into DIR
#   and enables the unit by its wants/ link, without running systemctl.
#   KTGUEST_BINARY defaults to ./ktguest beside this script.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=""
if [ "${1:-}" = "--root" ]; then
  [ $# -ge 2 ] || { echo "install-ktguest: --root needs a directory" >&2; exit 2; }
  ROOT=$(cd "$2" && pwd) || { echo "install-ktguest: no such directory: $2" >&2; exit 1; }
  shift 2
fi
BIN=${1:-$HERE/ktguest}
[ "$(id -u)" = 0 ] || { echo "install-ktguest: run as root" >&2; exit 1; }
[ -x "$BIN" ] || { echo "install-ktguest: $BIN is missing or not executable" >&2; exit 1; }
[ -f "$HERE/ktguest.service" ] || { echo "install-ktguest: ktguest.service not found beside this script" >&2; exit 1; }
install -D -m 755 "$BIN" "$ROOT/usr/local/sbin/ktguest"
install -D -m 644 "$HERE/ktguest.service" "$ROOT/etc/systemd/system/ktguest.service"
mkdir -p "$ROOT/etc/modules-load.d"
echo virtio_console >"$ROOT/etc/modules-load.d/ktguest.conf"
if [ -n "$ROOT" ]; then
  # What `systemctl enable` does for WantedBy=multi-user.target.
  mkdir -p "$ROOT/etc/systemd/system/multi-user.target.wants"
  ln -sf /etc/systemd/system/ktguest.service "$ROOT/etc/systemd/system/multi-user.target.wants/ktguest.service"
  echo "install-ktguest: installed into $ROOT (enabled; starts at the image's next boot)"
  exit 0
fi
modprobe virtio_console 2>/dev/null || true
systemctl daemon-reload
systemctl enable --now ktguest.service
echo "install-ktguest: ktguest installed and started; logs: journalctl -u ktguest"
