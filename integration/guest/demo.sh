#!/bin/sh
# demo.sh a|b: the main job's guest side (integration/demo). Host a serves, host b drives: the same
# unmodified tools once over kernel TCP (ports 52xx) and once under the shim over RDMA (ports 53xx,
# integration/rules/demo.yaml), each carrying checked bytes. b prints the table.
set -u
here=$(dirname "$0")
rules=$(cd "$here/.." && pwd)/rules/demo.yaml
shim() { env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$T2R_WORK/shim-$T2R_HOST.log" "$@"; }
plain() { "$@"; }
pkts() { "$here/rdma-counters" | awk '$1=="sent_pkts"||$1=="rcvd_pkts"{n+=$2} END{print n}'; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

if [ "$1" = a ]; then
  for mode in plain shim; do
    port=$([ $mode = plain ] && echo 5201 || echo 5301)
    $mode nc -N -l $port > /tmp/nc-$mode.bin
    sha256sum < /tmp/nc-$mode.bin | cut -d' ' -f1 > "$T2R_WORK/nc-$mode.tmp"
    mv "$T2R_WORK/nc-$mode.tmp" "$T2R_WORK/nc-$mode.received"  # whole, or not there at all
    $mode iperf3 -s -1 -p $((port + 1)) > /dev/null 2>&1 &
    echo ready > "$T2R_WORK/iperf3-$mode.ready"
    wait
    $mode timeout 14 sockperf sr --tcp -p $((port + 2)) > /dev/null 2>&1
  done
  exit 0
fi

head -c $((32 * 1048576)) /dev/urandom > /tmp/data
want=$(sha256sum < /tmp/data | cut -d' ' -f1)
retry() { i=0; until "$@"; do i=$((i+1)); [ $i -lt 50 ] || return 1; sleep 0.3; done; }
for mode in plain shim; do
  port=$([ $mode = plain ] && echo 5201 || echo 5301)
  before=$(pkts)
  start=$(now_ms)
  retry $mode nc -N 10.77.0.1 $port < /tmp/data
  nc_ms=$(( $(now_ms) - start ))
  i=0; until [ -f "$T2R_WORK/nc-$mode.received" ]; do i=$((i+1)); [ $i -lt 100 ] || break; sleep 0.1; done
  got=$(cat "$T2R_WORK/nc-$mode.received" 2>/dev/null)
  nc_ok=$([ "$got" = "$want" ] && echo "sha256 equal" || echo "SHA256 DIFFERS")
  i=0; until [ -f "$T2R_WORK/iperf3-$mode.ready" ]; do i=$((i+1)); [ $i -lt 150 ] || break; sleep 0.1; done
  sleep 0.5
  iperf=$(retry $mode iperf3 -c 10.77.0.1 -p $((port + 1)) -t 3 -f m | awk '/receiver/{print $(NF-2), $(NF-1)}')
  sleep 1
  lat=$(retry $mode sockperf pp --tcp -i 10.77.0.1 -p $((port + 2)) -t 3 -m 64 2>&1 |
        sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p')
  sockperf_ok=$(retry $mode sockperf pp --tcp -i 10.77.0.1 -p $((port + 2)) -t 1 -m 64 2>&1 | grep -c 'dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0')
  moved=$(( $(pkts) - before ))
  eval "r_$mode=\"| $mode | $nc_ms ms, $nc_ok | $iperf | $lat us (sequence $([ "$sockperf_ok" -ge 1 ] && echo ok || echo BROKEN)) | $moved |\""
done
upgraded=$(grep -c 'upgraded to rdma' "$T2R_WORK/shim-b.log" 2>/dev/null || echo 0)
echo
echo "tcp2rdma demo: two VMs (1 vCPU each, QEMU TCG) on a private wire, Soft-RoCE on each."
echo "plain = kernel TCP; shim = the same binaries under libtcp2rdma.so, rule demo-over-rdma."
echo "Soft-RoCE does in software, on the same emulated CPU, what an RDMA NIC does in hardware: here it"
echo "is slower than kernel TCP (perftest's ib_write_bw reaches 23-28 MB/s on this pair); compare the"
echo "shim with RDMA references (docs/benchmarks.md), and read this table for: same bytes, same tools."
echo
echo "| path | nc 32 MiB | iperf3 3 s | sockperf ping-pong 64 B, median RTT/2 | RDMA packets |"
echo "| --- | --- | --- | --- | --- |"
echo "$r_plain"
echo "$r_shim"
echo
echo "shim log (host b): $upgraded connections upgraded to rdma"
grep -v ': loaded$' "$T2R_WORK/shim-b.log" | sed 's/^/  /'
case "$r_shim" in *"sha256 equal"*) ;; *) exit 1 ;; esac
[ "$upgraded" -ge 3 ]
