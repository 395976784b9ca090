#!/bin/sh
# The main job on the bundled test VM, through libvirt:
#   1. install packages and build (kthost, guest kit, test image, PT plugin);
#   2. start libvirtd (by hand where there is no systemd);
#   3. define and start the test domain (TCG with the software PT plugin,
#      KVM's hardware PT is used instead where `kthost doctor` allows it);
#   4. `kthost trace --domain` a workload: syscalls, BPF programs loaded and
#      unloaded (fentry ones through trampolines), a module loaded and
#      unloaded, a static key toggled;
#   5. `kthost report` on the bundle.
# Everything is in tests/vm/run-main-job.sh, which CI also runs with --check.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build}
"$src/scripts/install-deps.sh"
"$src/scripts/build.sh" "$build"
keep=$(mktemp -d /tmp/kthost-demo-XXXXXX)
"$src/tests/vm/run-main-job.sh" "$build" --check --keep "$keep"
echo "== done; the bundle is in $keep/bundle (kthost report $keep/bundle --flamegraph flame.svg, kthost diff A B)"
