#!/bin/sh
# bench-redis-client.sh SHIM RULES N: the client guest's half of integration/bench-redis.sh. For each C
# of CLIENTS, redis-benchmark -c C -n N -t set,get without the module against the server guest's
# plain redis on port 6391 (tcp: kernel TCP at both ends), then under it against its redis under the
# module on port 6390 (rdma). Each prints a "result" line: the requests per second
# redis-benchmark reports for SET and GET, the connections its log shows on RDMA and on TCP, and the
# RDMA packets rxe sent meanwhile.
set -u
shim=$1 rules=$2 n=$3
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/wait-servers.sh" || exit 1
ulimit -Hn 1048576 2>/dev/null; ulimit -Sn 65536
run() { # MODE CLIENTS PORT [env...]
  mode=$1 c=$2 port=$3
  shift 3
  log=/tmp/bench-redis-$mode-$c.log
  : > "$log"
  before=$("$here/rdma-counters" | awk '$1 == "sent_pkts" {print $2}')
  start=$(date +%s.%N)
  out=$(env "$@" TCP2RDMA_LOG="$log" redis-benchmark -h "$T2R_PEER" -p "$port" -c "$c" -n "$n" -t set,get -q 2>&1)
  status=$?
  end=$(date +%s.%N)
  after=$("$here/rdma-counters" | awk '$1 == "sent_pkts" {print $2}')
  set_rps=$(echo "$out" | tr '\r' '\n' | grep -o 'SET: [0-9.]* requests per second' | tail -1 | awk '{print $2}')
  get_rps=$(echo "$out" | tr '\r' '\n' | grep -o 'GET: [0-9.]* requests per second' | tail -1 | awk '{print $2}')
  echo "result mode=$mode clients=$c status=$status set_rps=${set_rps:--} get_rps=${get_rps:--} seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') on_rdma=$(grep -c 'upgraded to rdma' "$log") on_tcp=$(grep -c 'stays tcp' "$log") rdma_packets=$((after - before))"
  grep -o 'stays tcp (.*' "$log" | sed 's/ ([0-9]* ms)//' | sort | uniq -c | sort -rn | head -4 | sed 's/^/  why: /'
}
for c in ${CLIENTS:-50 1000}; do
  run tcp "$c" 6391
  run rdma "$c" 6390 LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
done
