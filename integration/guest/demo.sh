#!/bin/sh
# demo.sh a|b: the main job's guest side (integration/demo). Host a serves, host b drives: the same
# unmodified tools once over kernel TCP (ports 52xx) and once under the shim over RDMA (ports 53xx,
# integration/rules/demo.yaml), each carrying checked bytes; then perftest's ib_write_bw and
# ib_send_lat on the same pair and device (ports 54xx), the RDMA references the shim is measured
# against. b prints the table; each step it starts goes to $T2R_WORK/progress (integration/demo
# shows them as they come).
set -u
here=$(dirname "$0")
rules=$(cd "$here/.." && pwd)/rules/demo.yaml
shim() { env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$T2R_WORK/shim-$T2R_HOST.log" "$@"; }
plain() { "$@"; }
pkts() { "$here/rdma-counters" | awk '$1=="sent_pkts"||$1=="rcvd_pkts"{n+=$2} END{print n}'; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
step() { echo "$*" >> "$T2R_WORK/progress"; }
# perftest: the server side on a, the client on b, which retries until the server listens.
ib_bw_size=131072  # iperf3's write size over TCP

if [ "$1" = a ]; then
  for mode in plain shim; do
    port=$([ $mode = plain ] && echo 5201 || echo 5301)
    $mode nc -N -l $port > /tmp/nc-$mode.bin &
    # b starts its clock once the listener is there (a process under the module starts slower, and
    # b's retries would otherwise be timed as the transfer).
    i=0; until ss -Hltn "sport = :$port" | grep -q LISTEN; do i=$((i+1)); [ $i -lt 300 ] || break; sleep 0.1; done
    echo ready > "$T2R_WORK/nc-$mode.listening"
    wait
    sha256sum < /tmp/nc-$mode.bin | cut -d' ' -f1 > "$T2R_WORK/nc-$mode.tmp"
    mv "$T2R_WORK/nc-$mode.tmp" "$T2R_WORK/nc-$mode.received"  # whole, or not there at all
    $mode iperf3 -s -1 -p $((port + 1)) > /dev/null 2>&1 &
    echo ready > "$T2R_WORK/iperf3-$mode.ready"
    wait
    $mode timeout 14 sockperf sr --tcp -p $((port + 2)) > /dev/null 2>&1
  done
  timeout 60 ib_write_bw -d rxe0 -p 5401 -s $ib_bw_size -D 3 > /dev/null 2>&1
  timeout 60 ib_send_lat -d rxe0 -p 5402 -s 64 -n 2000 > /dev/null 2>&1
  exit 0
fi

head -c $((32 * 1048576)) /dev/urandom > /tmp/data
want=$(sha256sum < /tmp/data | cut -d' ' -f1)
retry() { i=0; until "$@"; do i=$((i+1)); [ $i -lt 50 ] || return 1; sleep 0.3; done; }
for mode in plain shim; do
  port=$([ $mode = plain ] && echo 5201 || echo 5301)
  path=$([ $mode = plain ] && echo "kernel TCP" || echo "tcp2rdma (RDMA)")
  step "nc 32 MiB over $path"
  i=0; until [ -f "$T2R_WORK/nc-$mode.listening" ]; do i=$((i+1)); [ $i -lt 300 ] || break; sleep 0.1; done
  before=$(pkts)
  start=$(now_ms)
  retry $mode nc -N 10.77.0.1 $port < /tmp/data
  nc_ms=$(( $(now_ms) - start ))
  # The connection's setup and switch, as the client's log gives them (none on kernel TCP): the
  # transfer is the rest, rated in MiB/s as perftest and iperf3 -f M rate.
  setup_ms=0
  if [ $mode = shim ]; then
    setup_ms=$(sed -n "s/.*-> 10.77.0.1:$port: .*setup \([0-9]*\) ms, switch \([0-9]*\) ms.*/\1 \2/p" \
               "$T2R_WORK/shim-$T2R_HOST.log" | awk '{ print $1 + $2; exit }')
    setup_ms=${setup_ms:-0}
  fi
  rate=$(awk -v ms=$((nc_ms - setup_ms)) 'BEGIN { if (ms > 0) printf "%.1f", 32 * 1000 / ms }')
  eval "nc_rate_$mode=\$rate"
  nc_setup=$([ "$setup_ms" -gt 0 ] && echo ", setup $setup_ms ms" || echo "")
  i=0; until [ -f "$T2R_WORK/nc-$mode.received" ]; do i=$((i+1)); [ $i -lt 100 ] || break; sleep 0.1; done
  got=$(cat "$T2R_WORK/nc-$mode.received" 2>/dev/null)
  nc_ok=$([ "$got" = "$want" ] && echo "sha256 equal" || echo "SHA256 DIFFERS")
  i=0; until [ -f "$T2R_WORK/iperf3-$mode.ready" ]; do i=$((i+1)); [ $i -lt 150 ] || break; sleep 0.1; done
  sleep 0.5
  step "iperf3 3 s over $path"
  iperf=$(retry $mode iperf3 -c 10.77.0.1 -p $((port + 1)) -t 3 -f M | awk '/receiver/{print $(NF-2), $(NF-1)}')
  eval "iperf_$mode=\$(echo \"\$iperf\" | cut -d' ' -f1)"
  sleep 1
  step "sockperf ping-pong 64 B over $path"
  lat=$(retry $mode sockperf pp --tcp -i 10.77.0.1 -p $((port + 2)) -t 3 -m 64 2>&1 |
        sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p')
  sockperf_ok=$(retry $mode sockperf pp --tcp -i 10.77.0.1 -p $((port + 2)) -t 1 -m 64 2>&1 | grep -c 'dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0')
  eval "lat_$mode=\$lat"
  moved=$(( $(pkts) - before ))
  eval "r_$mode=\"| $mode | $nc_ms ms$nc_setup, $nc_ok | $iperf | $lat us (sequence $([ "$sockperf_ok" -ge 1 ] && echo ok || echo BROKEN)) | $moved |\""
done
step "perftest references: ib_write_bw $ib_bw_size B for 3 s, ib_send_lat 64 B"
# a starts its perftest servers once its sockperf server's 14 s are over: wait longer than retry does.
retry_long() { i=0; until "$@"; do i=$((i+1)); [ $i -lt 100 ] || return 1; sleep 0.3; done; }
ib_bw=$(retry_long ib_write_bw -d rxe0 -p 5401 -s $ib_bw_size -D 3 10.77.0.1 2>/dev/null | awk '/^ *[0-9]+ +[0-9]+ /{print $4}')
sleep 1
ib_lat=$(retry_long ib_send_lat -d rxe0 -p 5402 -s 64 -n 2000 10.77.0.1 2>/dev/null | awk '/^ *64 +[0-9]+ /{print $5}')
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
upgraded=$(grep -c 'upgraded to rdma' "$T2R_WORK/shim-b.log" 2>/dev/null || echo 0)
accel=$([ "${T2R_ACCEL:-tcg}" = kvm ] && echo "KVM" || echo "QEMU TCG, emulated CPU")
echo
echo "tcp2rdma demo: two VMs (1 vCPU each, $accel) on a private wire, Soft-RoCE on each."
echo "plain = kernel TCP; shim = the same binaries under libtcp2rdma.so, rule demo-over-rdma."
echo "Soft-RoCE does in software, on the same CPU, what an RDMA NIC does in hardware, so RDMA here can be"
echo "slower than kernel TCP: the shim is measured against perftest on the same pair, in this run."
echo
echo "| path | nc 32 MiB | iperf3 3 s | sockperf ping-pong 64 B, median RTT/2 | RDMA packets |"
echo "| --- | --- | --- | --- | --- |"
echo "$r_plain"
echo "$r_shim"
echo
echo "RDMA references, measured above on the same pair and device (rxe0):"
echo "| what | perftest | shim | shim / perftest |"
echo "| --- | --- | --- | --- |"
echo "| throughput: iperf3 (MBytes/sec) vs ib_write_bw $ib_bw_size B (MB/sec) | ${ib_bw:-n/a} | ${iperf_shim:-n/a} | $(ratio "$iperf_shim" "$ib_bw") |"
echo "| throughput: nc 32 MiB in 16 KiB writes, setup excluded (MB/s) vs ib_write_bw $ib_bw_size B (MB/sec) | ${ib_bw:-n/a} | ${nc_rate_shim:-n/a} | $(ratio "$nc_rate_shim" "$ib_bw") |"
echo "| latency 64 B: sockperf median RTT/2 vs ib_send_lat t_typical (us) | ${ib_lat:-n/a} | ${lat_shim:-n/a} | $(ratio "$lat_shim" "$ib_lat") |"
echo
echo "shim log (host b): $upgraded connections upgraded to rdma"
grep -v ': loaded$' "$T2R_WORK/shim-b.log" | sed 's/^/  /'
case "$r_shim" in *"sha256 equal"*) ;; *) exit 1 ;; esac
[ "$upgraded" -ge 3 ]
