#!/bin/sh
# fault.sh SHIM RULES KIND: the sending guest's half of integration.fault_*.pair. OpenBSD nc under the
# module sends 48 MiB of random bytes over RDMA to fault_reader.py in the other guest (port 5012,
# before-return), which reads them at 6 MiB/s; 1 s into the transfer on RDMA the path breaks:
#   wire      both guests drop every frame (netem loss 100%) for 8 s, longer than RDMA's retries
#             (the other guest applies its own when it sees $T2R_WORK/outage)
#   device-a  the reader's RDMA device is removed (the other guest does it on $T2R_WORK/remove)
#   device-b  this guest's RDMA device is removed
# As over kernel TCP, the transfer carries on: the reader must get every byte, in order, once (its
# SHA-256), then a clean end; both sides' logs must show the connection going on over TCP.
set -u
shim=$1 rules=$2 kind=$3
log=$T2R_WORK/shim-$T2R_HOST.log
head -c 50331648 /dev/urandom > /tmp/data
sha256sum < /tmp/data | cut -d' ' -f1 > "$T2R_WORK/data.sha"
sh "$(dirname "$0")/../../../integration/guest/wait-listening.sh" "$T2R_WORK/reader.err" || exit 1
env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" \
  nc -N "$T2R_PEER" 5012 < /tmp/data > /dev/null 2> /tmp/nc.err &
nc=$!
# The fault 1 s into the transfer on RDMA: after the upgrade (before-return: the bytes start then),
# however long a loaded testbed takes for it (once more than the 3 s this used to sleep).
i=0
until grep -q 'upgraded to rdma' "$log" 2>/dev/null || [ $i -ge 300 ]; do i=$((i + 1)); sleep 0.1; done
sleep 1
case "$kind" in
  wire) touch "$T2R_WORK/outage"; tc qdisc add dev "$T2R_NETDEV" root netem loss 100%; sleep 8
        tc qdisc del dev "$T2R_NETDEV" root ;;
  device-a) touch "$T2R_WORK/remove" ;;
  device-b) rdma link delete rxe0 & ;;
esac
i=0
until [ -f "$T2R_WORK/reader.done" ] || [ $i -ge 1200 ]; do i=$((i + 1)); sleep 0.1; done
wait $nc
status=$?
[ $status -eq 0 ] || { echo "fault: nc failed (status $status):"; cat /tmp/nc.err; }
grep 'upgraded to rdma\|rdma path failed\|rdma stream failed' "$log"
grep -q 'upgraded to rdma' "$log" && grep -q 'back on tcp (rdma path failed' "$log" && [ $status -eq 0 ]
