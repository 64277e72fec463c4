#!/bin/sh
# wait_upgrades.sh LOG N: waits until the shim log LOG has N "upgraded to rdma" lines, 30 s at most
# (a loaded testbed's upgrade can take seconds); always succeeds: the caller counts them itself.
i=0
while [ $i -lt 300 ]; do
  n=$(grep -c 'upgraded to rdma' "$1" 2>/dev/null)
  [ "${n:-0}" -ge "$2" ] && exit 0
  i=$((i + 1))
  sleep 0.1
done
exit 0
