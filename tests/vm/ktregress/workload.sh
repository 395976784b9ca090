# The regression tests' workload (busybox sh in the guest): ktregress_work
# 20 times through the module's parameter, amid a few ordinary syscalls.
[ -d /sys/module/ktregress ] || insmod /lib/kthost-test/ktregress.ko || exit 1
i=0
while [ $i -lt 20 ]; do
  echo $i >/sys/module/ktregress/parameters/run
  cat /proc/uptime >/dev/null
  i=$((i + 1))
done
ls /proc >/dev/null
