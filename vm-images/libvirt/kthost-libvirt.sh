#!/bin/sh
# kthost-libvirt.sh: run the kthost test image as a libvirt domain, on a
# machine with or without systemd.
#
#   kthost-libvirt.sh start-daemon
#       Starts virtlogd and libvirtd by hand when they are not running
#       (idempotent) and waits until `virsh -c qemu:///system list` answers.
#   kthost-libvirt.sh define IMAGE_DIR [--name N] [--plugin PATH[,ARGS] | --no-plugin]
#                     [--ram memfd|file|none] [--no-channel] [--mem MiB]
#                     [--vcpus N] [--on-reboot destroy|restart] [--accel auto|kvm|tcg] [--append ARGS]
#   kthost-libvirt.sh define --disk DISK.qcow2 [same options but --append]
#       Writes /var/lib/kthost/libvirt/N.xml from kthost-test.xml.in and
#       defines it (redefines a stopped domain of that name). Under TCG the
#       software PT plugin (IMAGE_DIR/../pt-plugin/ktpt.so) is loaded by
#       default, switched on only by kthost trace's trigger file. --ram none
#       and --no-channel make the domains the tests use to check kthost's errors.
#       --disk: the systemd disk image (vm-images/build-disk-image.sh) on a
#       virtio disk, booted by its own GRUB and its own kernel command line;
#       a reboot restarts it in place (IMAGE_DIR is the disk's directory).
#   kthost-libvirt.sh start NAME [--timeout S]
#       virsh start, then waits for KTHOST-READY on the serial console log
#       (as vm-images/ktvm does); prints the console tail if it never comes.
#   kthost-libvirt.sh stop NAME [--timeout S]    shutdown: virsh destroy (the
#       test guest has no ACPI shutdown handler: it is a power cut, like ktvm stop)
#   kthost-libvirt.sh undefine NAME              stop, then undefine and remove its files
#   kthost-libvirt.sh stop-daemon                stops what start-daemon started
#
# What it changes on the host (all marked, all idempotent):
#   /etc/libvirt/qemu.conf  gets a block between "# BEGIN kthost" and
#     "# END kthost": QEMU runs as root:root (the image under the build tree
#     and the sockets under /run/kthost stay reachable), no security driver
#     (no AppArmor/SELinux profile is needed), no cgroup controllers and no
#     mount namespace (these fail in containers without systemd). Remove
#     the block to undo it; libvirtd reads it when it starts.
#   /var/lib/kthost/libvirt/libvirtd.conf: libvirtd's own config when this
#     script starts it (unix socket root-only, no polkit: there is no D-Bus).
#   /var/lib/kthost/libvirt/   domain XML files, daemon logs.
#   /run/kthost/NAME/          the guest's channel sockets and console log.
# Environment: KTHOST_LIBVIRT_HOST_UUID=UUID gives the libvirtd that
#   start-daemon starts that host UUID (a second libvirtd in its own
#   namespaces, as tests/vm/run-agent-pod.sh runs one, must differ).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
URI=qemu:///system
STATE=/var/lib/kthost/libvirt
RUNDIR=/run/kthost
TEMPLATE="$HERE/kthost-test.xml.in"
APPEND_DEFAULT="console=ttyS0 quiet panic=-1 tsc=reliable"

die() { echo "kthost-libvirt: $*" >&2; exit 1; }
say() { echo "kthost-libvirt: $*" >&2; }
virsh_q() { virsh -q -c "$URI" "$@"; }

# The accelerator rule lives in one place, `kthost accel` (host/vm
# accelerator.h): KVM only where it can run a stock x86-64 guest. Prints
# "kvm: why" or "tcg: why". Without a kthost binary nothing proves KVM works.
accel_rule() {
  bin=${KTHOST:-}
  [ -n "$bin" ] || [ -z "${1:-}" ] || bin="$1/../host/cli/kthost"
  [ -x "$bin" ] || bin=$(command -v kthost 2>/dev/null || true)
  if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "tcg: no kthost binary (set KTHOST) to check whether KVM can run a stock guest"
    return 0
  fi
  "$bin" accel 2>/dev/null || echo "tcg: '$bin accel' failed, so KVM is not trusted"
}

configure_qemu_conf() {
  conf=/etc/libvirt/qemu.conf
  [ -f "$conf" ] || die "$conf is missing (install libvirt-daemon-driver-qemu: scripts/install-deps.sh)"
  if grep -q '^# BEGIN kthost' "$conf"; then return 0; fi
  cat >>"$conf" <<'EOF'
# BEGIN kthost (vm-images/libvirt/kthost-libvirt.sh; remove this block to undo)
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
# END kthost
EOF
  say "added the kthost block to $conf"
}

write_libvirtd_conf() {
  mkdir -p "$STATE"
  cat >"$STATE/libvirtd.conf" <<'EOF'
# Written by kthost-libvirt.sh start-daemon: local root-only access, no polkit.
listen_tls = 0
listen_tcp = 0
unix_sock_group = "root"
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:stderr"
EOF
  # A second libvirtd on this machine (a test's "pod", the target of a
  # migration) needs its own host UUID: libvirt refuses to migrate to itself.
  [ -z "${KTHOST_LIBVIRT_HOST_UUID:-}" ] || echo "host_uuid = \"$KTHOST_LIBVIRT_HOST_UUID\"" >>"$STATE/libvirtd.conf"
}

pid_running() { [ -n "$1" ] && [ -d "/proc/$1" ] && ! grep -q '^State:.*[ZX]' "/proc/$1/status" 2>/dev/null; }

daemon_answers() { timeout 10 virsh -q -c "$URI" list >/dev/null 2>&1; }

cmd_start_daemon() {
  command -v libvirtd >/dev/null || [ -x /usr/sbin/libvirtd ] || die "libvirtd is not installed (scripts/install-deps.sh)"
  PATH=$PATH:/usr/sbin
  configure_qemu_conf
  if daemon_answers; then
    say "libvirtd already answers on $URI"
    return 0
  fi
  write_libvirtd_conf
  mkdir -p /run/libvirt "$STATE" "$RUNDIR"
  if ! pid_running "$(cat /run/virtlogd.pid 2>/dev/null || true)"; then
    rm -f /run/virtlogd.pid
    virtlogd -d -p /run/virtlogd.pid || die "virtlogd failed to start"
  fi
  if ! pid_running "$(cat /run/libvirtd.pid 2>/dev/null || true)"; then
    rm -f /run/libvirtd.pid
    # -d daemonizes; its log goes to $STATE/libvirtd.log.
    libvirtd -d -p /run/libvirtd.pid -f "$STATE/libvirtd.conf" >>"$STATE/libvirtd.log" 2>&1 ||
      die "libvirtd failed to start; see $STATE/libvirtd.log"
  fi
  i=0
  while [ $i -lt 60 ]; do
    if daemon_answers; then
      say "libvirtd answers on $URI"
      return 0
    fi
    sleep 0.5
    i=$((i + 1))
  done
  tail -20 "$STATE/libvirtd.log" >&2 || true
  die "libvirtd did not answer on $URI within 30 s"
}

cmd_stop_daemon() {
  for name in libvirtd virtlogd; do
    pid=$(cat "/run/$name.pid" 2>/dev/null || true)
    if pid_running "$pid"; then
      kill "$pid"
      say "stopped $name (pid $pid)"
    fi
  done
}

check_name() {
  case "$1" in
    ''|*[!A-Za-z0-9_.-]*) die "bad domain name '$1' (use [A-Za-z0-9_.-])" ;;
  esac
}

# Escapes &, <, > and quotes for an XML attribute or text.
xml_escape() { printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e "s/'/\&apos;/g" -e 's/"/\&quot;/g'; }

cmd_define() {
  [ $# -ge 1 ] || die "usage: define IMAGE_DIR|--disk DISK.qcow2 [--name N] [--plugin PATH[,ARGS] | --no-plugin] [--ram memfd|file|none] [--no-channel] [--mem MiB] [--vcpus N] [--on-reboot destroy|restart] [--accel auto|kvm|tcg] [--append ARGS]"
  disk=""
  if [ "$1" = --disk ]; then
    [ $# -ge 2 ] || die "define --disk needs a disk image"
    [ -f "$2" ] || die "disk image $2 does not exist (vm-images/build-disk-image.sh)"
    disk=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
    image=$(dirname "$disk")
    shift 2
  else
    image=$(cd "$1" 2>/dev/null && pwd) || die "image directory $1 does not exist"
    shift
  fi
  name=kthost-test plugin="" noplugin=0 ram=memfd channel=1 mem=512 vcpus=2 accel=auto extra="" reboot_policy=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) name=$2; shift 2 ;;
      --plugin) plugin=$2; shift 2 ;;
      --no-plugin) noplugin=1; shift ;;
      --ram) ram=$2; shift 2 ;;
      --no-channel) channel=0; shift ;;
      --mem) mem=$2; shift 2 ;;
      --vcpus) vcpus=$2; shift 2 ;;
      --on-reboot) reboot_policy=$2; shift 2 ;;
      --accel) accel=$2; shift 2 ;;
      --append) extra=$2; shift 2 ;;
      *) die "define: unknown option $1" ;;
    esac
  done
  check_name "$name"
  if [ -n "$disk" ]; then
    [ -z "$extra" ] || die "--append: the disk image boots with its own GRUB command line (/etc/default/grub)"
    boot="<boot dev='hd'/>" onreboot=restart
    diskxml="<disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$(xml_escape "$disk")'/>
      <target dev='vda' bus='virtio'/>
    </disk>"
  else
    for f in vmlinuz initrd.gz; do
      [ -f "$image/$f" ] || die "$image/$f is missing (build the image: cmake --build BUILD --target vm-image)"
    done
    append=$APPEND_DEFAULT
    [ -z "$extra" ] || append="$append $extra"
    boot="<kernel>$(xml_escape "$image/vmlinuz")</kernel>
    <initrd>$(xml_escape "$image/initrd.gz")</initrd>
    <cmdline>$(xml_escape "$append")</cmdline>" onreboot=destroy diskxml=""
  fi
  case "$mem" in ''|*[!0-9]*) die "--mem takes MiB" ;; esac
  case "$vcpus" in ''|0|*[!0-9]*) die "--vcpus takes a count" ;; esac
  # The initramfs image powers off on a reboot (like ktvm's -no-reboot);
  # --on-reboot restart lets a guest reset in place (QEMU keeps running).
  case "$reboot_policy" in
    '') ;;
    destroy|restart) onreboot=$reboot_policy ;;
    *) die "--on-reboot destroy|restart" ;;
  esac
  rule=$(accel_rule "$image")
  case "$accel" in
    auto) accel=${rule%%:*}; say "accelerator $rule" ;;
    kvm|tcg) [ "$accel" = "${rule%%:*}" ] || say "warning: --accel $accel, though the rule says $rule" ;;
    *) die "--accel auto|kvm|tcg" ;;
  esac
  if [ "$accel" = kvm ]; then dtype=kvm cpu="<cpu mode='host-passthrough'/>"; else dtype=qemu cpu="<cpu mode='maximum'/>"; fi

  dir="$RUNDIR/$name"
  mkdir -p "$dir" "$STATE"
  case "$ram" in
    memfd) membacking="<memoryBacking>
    <source type='memfd'/>
    <access mode='shared'/>
  </memoryBacking>" ;;
    file) membacking="<memoryBacking>
    <source type='file'/>
    <access mode='shared'/>
  </memoryBacking>" ;;
    none) membacking="" ;;
    *) die "--ram memfd|file|none" ;;
  esac
  channels=""
  if [ "$channel" = 1 ]; then
    channels="<channel type='unix'>
      <source mode='bind' path='$dir/kthost0.sock'/>
      <target type='virtio' name='org.kthost.0'/>
    </channel>
    <channel type='unix'>
      <source mode='bind' path='$dir/exec.sock'/>
      <target type='virtio' name='org.kthost.exec'/>
    </channel>"
  else
    # Without org.kthost.0, but still with the exec port the image waits for.
    channels="<channel type='unix'>
      <source mode='bind' path='$dir/exec.sock'/>
      <target type='virtio' name='org.kthost.exec'/>
    </channel>"
  fi
  # Under TCG the software PT plugin is on by default when the build has it
  # (BUILD/pt-plugin/ktpt.so next to BUILD/vm-image); it traces only while
  # kthost trace holds its trigger file.
  if [ -z "$plugin" ] && [ "$noplugin" = 0 ] && [ "$accel" = tcg ] && [ -f "$image/../pt-plugin/ktpt.so" ]; then
    mkdir -p "$STATE/$name-pt"
    plugin="$image/../pt-plugin/ktpt.so,out=$STATE/$name-pt,trigger=$dir/pt-on"
  fi
  qemu_cmdline=""
  if [ -n "$plugin" ]; then
    [ "$accel" = tcg ] || die "--plugin needs TCG (add --accel tcg): QEMU plugins only see TCG-translated code"
    ppath=${plugin%%,*}
    [ -f "$ppath" ] || die "--plugin: $ppath is not a file"
    pargs=""
    [ "$ppath" = "$plugin" ] || pargs=",${plugin#*,}"
    ppath=$(cd "$(dirname "$ppath")" && pwd)/$(basename "$ppath")
    qemu_cmdline="<qemu:commandline>
    <qemu:arg value='-plugin'/>
    <qemu:arg value='$(xml_escape "file=$ppath$pargs")'/>
  </qemu:commandline>"
  fi
  xml="$STATE/$name.xml"
  # Multi-line values go through awk (sed cannot take newlines in a replacement).
  NAME=$name DTYPE=$dtype MEM=$mem VCPUS=$vcpus CPU=$cpu MEMBACKING=$membacking CHANNELS=$channels QEMUCMD=$qemu_cmdline \
  BOOT=$boot ONREBOOT=$onreboot DISK=$diskxml CONSOLE=$(xml_escape "$dir/console.log") \
    awk '{
      n = split("NAME DTYPE MEM VCPUS CPU MEMBACKING CHANNELS QEMUCMD BOOT ONREBOOT DISK CONSOLE", keys, " ")
      for (i = 1; i <= n; i++) {
        key = "@" keys[i] "@"
        while ((p = index($0, key)) > 0) $0 = substr($0, 1, p - 1) ENVIRON[keys[i]] substr($0, p + length(key))
      }
      print
    }' "$TEMPLATE" >"$xml.tmp"
  mv "$xml.tmp" "$xml"
  if virsh_q dominfo "$name" >/dev/null 2>&1; then
    state=$(virsh_q domstate "$name" 2>/dev/null || true)
    [ "$state" = "shut off" ] || die "domain $name exists and is $state; stop it first"
    # A new definition without the old UUID would be refused: replace it.
    virsh_q undefine "$name" >/dev/null || die "virsh undefine $name (to redefine it) failed"
  fi
  virsh_q define "$xml" >/dev/null || die "virsh define $xml failed"
  say "defined $name ($accel, ${disk:+disk $disk, }ram $ram, channel $([ "$channel" = 1 ] && echo yes || echo no)${plugin:+, plugin $plugin}) from $xml"
  echo "$xml"
}

cmd_start() {
  [ $# -ge 1 ] || die "usage: start NAME [--timeout S]"
  name=$1
  shift
  timeout_s=180
  [ "${1:-}" != --timeout ] || timeout_s=$2
  check_name "$name"
  dir="$RUNDIR/$name"
  log="$dir/console.log"
  mkdir -p "$dir"
  rm -f "$log" "$dir"/*.sock
  dtype=$(virsh_q dumpxml "$name" 2>/dev/null | sed -n "s/^<domain type='\([a-z]*\)'.*/\1/p" | head -1)
  virsh_q start "$name" >/dev/null || die "virsh start $name failed"
  start=$(date +%s)
  while :; do
    if grep -a -q 'KTHOST-READY release=' "$log" 2>/dev/null; then
      release=$(grep -a -o 'KTHOST-READY release=[^ ]*' "$log" | head -1 | cut -d= -f2 | tr -d '\r')
      say "$name ready in $(( $(date +%s) - start )) s (kernel $release)"
      return 0
    fi
    state=$(virsh_q domstate "$name" 2>/dev/null || echo gone)
    if [ "$state" != running ]; then
      say "$name is $state before the guest was ready${dtype:+ (domain type $dtype)}; last console lines:"
      [ "$dtype" != kvm ] || say "under KVM; the accelerator rule says: $(accel_rule "")"
      tail -30 "$log" >&2 2>/dev/null || true
      exit 1
    fi
    # Under KVM a healthy guest prints within seconds; one that stays silent
    # most likely never boots there (a kvm_pvm /dev/kvm, say).
    if [ "$dtype" = kvm ] && [ ! -s "$log" ] && [ $(( $(date +%s) - start )) -ge 45 ]; then
      say "no console output at all from $name in 45 s under KVM; this host's KVM likely cannot run a stock kernel" \
          "(kthost accel: $(accel_rule "")); redefine it with --accel tcg. Destroying it."
      virsh_q destroy "$name" >/dev/null 2>&1 || true
      exit 1
    fi
    if [ $(( $(date +%s) - start )) -ge "$timeout_s" ]; then
      say "no KTHOST-READY from $name within $timeout_s s; destroying it. Last console lines:"
      tail -30 "$log" >&2 2>/dev/null || true
      virsh_q destroy "$name" >/dev/null 2>&1 || true
      exit 1
    fi
    sleep 0.2
  done
}

cmd_stop() {
  [ $# -ge 1 ] || die "usage: stop NAME"
  name=$1
  check_name "$name"
  state=$(virsh_q domstate "$name" 2>/dev/null || echo absent)
  case "$state" in
    "shut off"|absent) say "$name is $state" ;;
    *) virsh_q destroy "$name" >/dev/null || die "virsh destroy $name failed"; say "stopped $name" ;;
  esac
}

cmd_undefine() {
  [ $# -ge 1 ] || die "usage: undefine NAME"
  name=$1
  check_name "$name"
  cmd_stop "$name"
  if virsh_q dominfo "$name" >/dev/null 2>&1; then
    virsh_q undefine "$name" >/dev/null || die "virsh undefine $name failed"
  fi
  rm -rf "${RUNDIR:?}/$name" "$STATE/$name.xml"
  say "undefined $name"
}

[ $# -ge 1 ] || die "usage: $0 start-daemon|stop-daemon|define|start|stop|undefine ..."
command=$1
shift
case "$command" in
  start-daemon) cmd_start_daemon ;;
  stop-daemon) cmd_stop_daemon ;;
  define) cmd_define "$@" ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  undefine) cmd_undefine "$@" ;;
  *) die "unknown command $command" ;;
esac
