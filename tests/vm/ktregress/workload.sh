# The regression tests' workload (busybox sh in the guest): ktregress_work
# 20 times through the module's parameter, amid a few ordinary syscalls.
# Transparent huge pages are switched off first: khugepaged's scans (2 M
# instructions every 10 s) would land in some runs and not in others.
[ -d /sys/module/ktregress ] || insmod /lib/kthost-test/ktregress.ko || exit 1
thp=/sys/kernel/mm/transparent_hugepage/enabled
[ ! -w $thp ] || grep -q '\[never\]' $thp || echo never >$thp
i=0
while [ $i -lt 20 ]; do
  echo $i >/sys/module/ktregress/parameters/run
  cat /proc/uptime >/dev/null
  i=$((i + 1))
done
ls /proc >/dev/null
