#!/bin/sh
# fault.sh SHIM RULES KIND: the sending guest's half of integration.fault_*.pair. OpenBSD nc under the
# module streams /dev/zero over RDMA to fault_reader.py in the other guest (port 5012, before-return);
# 3 s into the transfer the RDMA path breaks:
#   wire      both guests drop every frame (netem loss 100%) for 8 s, longer than RDMA's retries
#             (the other guest applies its own when it sees $T2R_WORK/outage)
#   device-a  the reader's RDMA device is removed (the other guest does it on $T2R_WORK/remove)
#   device-b  this guest's RDMA device is removed
# The reader must end with a reset (or another error) after the bytes that arrived, never a clean end.
set -u
shim=$1 rules=$2 kind=$3
sh "$(dirname "$0")/../../../integration/guest/wait-listening.sh" "$T2R_WORK/reader.err" || exit 1
env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$T2R_WORK/shim-$T2R_HOST.log" \
  nc "$T2R_PEER" 5012 < /dev/zero > /dev/null 2> /tmp/nc.err &
nc=$!
sleep 3
case "$kind" in
  wire) touch "$T2R_WORK/outage"; tc qdisc add dev "$T2R_NETDEV" root netem loss 100%; sleep 8
        tc qdisc del dev "$T2R_NETDEV" root ;;
  device-a) touch "$T2R_WORK/remove" ;;
  device-b) rdma link delete rxe0 ;;
esac
i=0
until [ -f "$T2R_WORK/reader.done" ] || [ $i -ge 600 ]; do i=$((i + 1)); sleep 0.1; done
kill $nc 2>/dev/null
grep -q 'upgraded to rdma' "$T2R_WORK/shim-$T2R_HOST.log"
