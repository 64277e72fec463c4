#!/usr/bin/env bash
# bench-shim-overhead.sh [ROUNDS]: what loading libtcp2rdma.so costs a connection that stays TCP.
# Loopback kernel TCP on this host, no rule selecting RDMA, with the module preloaded into both ends
# versus not at all. Runs alternate (plain, shim, plain, shim …) so that drift hits both alike, and each
# figure is the median of ROUNDS runs (default 5). Reference: the same tools without the module.
#   latency:    sockperf ping-pong, 64 B messages, median round trip (lower is better)
#   throughput: iperf3, one stream, 3 s (higher is better)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-5}
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
"$root/integration/deps.sh" testbed
export TCP2RDMA_TRANSPORT=tcp   # whatever the host's rules say, nothing here may go over RDMA

port=$((20000 + RANDOM % 20000))
with() { if [ "$1" = shim ]; then shift; LD_PRELOAD="$lib" "$@"; else shift; "$@"; fi; }
# For servers started with `&`: exec, so that $! is the server itself and kill reaches it.
spawn() { if [ "$1" = shim ]; then shift; LD_PRELOAD="$lib" exec "$@"; else shift; exec "$@"; fi; }

latency_us() { # MODE PORT
  local port=$2
  spawn "$1" sockperf sr --tcp -i 127.0.0.1 -p $port >/dev/null 2>&1 & local srv=$!
  sleep 0.3
  with "$1" sockperf pp --tcp -i 127.0.0.1 -p $port -t 3 -m 64 2>&1 |
    sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p'
  kill $srv 2>/dev/null; wait $srv 2>/dev/null || true
}

throughput_gbps() { # MODE PORT
  local port=$2
  spawn "$1" iperf3 -s -1 -p $port >/dev/null 2>&1 & local srv=$!
  sleep 0.3
  with "$1" iperf3 -c 127.0.0.1 -p $port -t 3 -J > /tmp/t2r-iperf3.json || true
  python3 -c 'import json,sys
r = json.load(open("/tmp/t2r-iperf3.json"))
if "error" in r: sys.exit("iperf3: " + r["error"])
print("%.3f" % (r["end"]["sum_received"]["bits_per_second"] / 1e9))'
  wait $srv 2>/dev/null || true
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

declare -A lat tput
for _ in $(seq "$rounds"); do
  for mode in plain shim; do
    port=$((port + 2))  # a fresh port per run: no server of a previous run can answer
    lat[$mode]+="$(latency_us $mode $port) "
    tput[$mode]+="$(throughput_gbps $mode $((port + 1))) "
  done
done
lp=$(echo ${lat[plain]} | tr ' ' '\n' | median); ls=$(echo ${lat[shim]} | tr ' ' '\n' | median)
tp=$(echo ${tput[plain]} | tr ' ' '\n' | median); ts=$(echo ${tput[shim]} | tr ' ' '\n' | median)
echo "shim overhead on loopback TCP, $rounds rounds, $(date -u +%F), $(nproc) cores"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
printf '  sockperf ping-pong 64 B, median us: plain %s  shim %s  ratio shim/plain %s\n' "$lp" "$ls" "$(ratio "$ls" "$lp")"
printf '  iperf3 1 stream, Gb/s:              plain %s  shim %s  ratio shim/plain %s\n' "$tp" "$ts" "$(ratio "$ts" "$tp")"
