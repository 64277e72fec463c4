#!/bin/sh
# fault_reader.sh SHIM RULES KIND: the reading guest's half of integration.fault_*.pair (fault.sh).
set -u
shim=$1 rules=$2 kind=$3
here=$(dirname "$0")
log=$T2R_WORK/shim-$T2R_HOST.log
(
  case "$kind" in
    wire) until [ -f "$T2R_WORK/outage" ]; do sleep 0.1; done
          tc qdisc add dev "$T2R_NETDEV" root netem loss 100%; sleep 8; tc qdisc del dev "$T2R_NETDEV" root ;;
    device-a) until [ -f "$T2R_WORK/remove" ]; do sleep 0.1; done; rdma link delete rxe0 ;;
  esac
) &
until [ -s "$T2R_WORK/data.sha" ]; do sleep 0.1; done
env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" \
  timeout 150 python3 "$here/fault_reader.py" 5012 50331648 "$(cat "$T2R_WORK/data.sha")" > /tmp/end 2> "$T2R_WORK/reader.err"
status=$?
touch "$T2R_WORK/reader.done"
cat /tmp/end
grep 'upgraded to rdma\|rdma path failed\|rdma stream failed' "$log"
wait
[ $status -eq 0 ] && grep -q 'upgraded to rdma' "$log" && grep -q 'back on tcp (rdma path failed' "$log"
