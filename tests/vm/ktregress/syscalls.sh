# A workload that needs nothing but the kernel (busybox sh in the guest):
# file, process and /proc syscalls, for comparing two kernels.
i=0
while [ $i -lt 20 ]; do
  cat /proc/uptime /proc/self/stat >/dev/null
  ls / /proc/self >/dev/null
  echo $i >/tmp/kthost-ci.txt && rm /tmp/kthost-ci.txt
  i=$((i + 1))
done
