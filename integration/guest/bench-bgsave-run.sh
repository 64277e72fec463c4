#!/bin/sh
# bench-bgsave-run.sh SHIM RULES ROLE ROUNDS [EVERY]: the guests' half of integration/bench-redis-bgsave.sh.
# server (A): two redis servers with their built-in snapshot settings (no `save` argument), 6390
# under the module and 6391 without it, and a BGSAVE to each every EVERY s (default 2; 0: none, the
# run that tells a fork's pause from the rest) through redis-cli over loopback, without the module,
# until the client is done. client (B): for each round, redis-benchmark -c 50
# -n 40000 -t set,get against 6391 without the module (tcp), then against 6390 under it (rdma).
# Prints the throughput and latency summaries, the forks, and what both shims' logs say of the
# connections (on RDMA, moved back to TCP, failed). The guests step together through files in $T2R_WORK.
set -u
shim=$1 rules=$2 role=$3 rounds=$4 every=${5:-2}
ln -sf /usr/bin/redis-check-rdb /tmp/redis-server
count() { grep -c "$1" "$2" 2>/dev/null || true; }
if [ "$role" = server ]; then
  mkdir -p /tmp/r-rdma /tmp/r-tcp
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$T2R_WORK/shim-server.log" \
    /tmp/redis-server --port 6390 --bind 0.0.0.0 --protected-mode no --dir /tmp/r-rdma > "$T2R_WORK/redis-rdma.log" 2>&1 &
  /tmp/redis-server --port 6391 --bind 0.0.0.0 --protected-mode no --dir /tmp/r-tcp > "$T2R_WORK/redis-tcp.log" 2>&1 &
  here=$(cd "$(dirname "$0")" && pwd)
  sh "$here/wait-listening.sh" "$T2R_WORK/redis-rdma.log" "Ready to accept" && sh "$here/wait-listening.sh" "$T2R_WORK/redis-tcp.log" "Ready to accept" || exit 1
  touch "$T2R_WORK/ready"
  until [ -e "$T2R_WORK/done" ]; do
    if [ "$every" -gt 0 ]; then
      redis-cli -h 127.0.0.1 -p 6390 BGSAVE > /dev/null 2>&1
      redis-cli -h 127.0.0.1 -p 6391 BGSAVE > /dev/null 2>&1
      sleep "$every"
    else
      sleep 0.2
    fi
  done
  # redis's own measure of its last fork (INFO stats: latest_fork_usec), under the module and without.
  fork_us() { redis-cli -h 127.0.0.1 -p "$1" INFO stats | tr -d '\r' | sed -n 's/^latest_fork_usec://p'; }
  echo "result forks rdma=$(count 'Background saving started' "$T2R_WORK/redis-rdma.log") tcp=$(count 'Background saving started' "$T2R_WORK/redis-tcp.log")" \
    "latest_fork_usec rdma=$(fork_us 6390) tcp=$(fork_us 6391)"
  echo "result server on_rdma=$(count 'upgraded to rdma' "$T2R_WORK/shim-server.log") back_on_tcp=$(count 'back on tcp' "$T2R_WORK/shim-server.log") failed=$(count 'failed\|reset' "$T2R_WORK/shim-server.log") stays_tcp=$(count 'stays tcp' "$T2R_WORK/shim-server.log") (the BGSAVE connections, without the module, stay TCP)"
  pkill -TERM -x redis-server
  wait
else
  until [ -e "$T2R_WORK/ready" ]; do sleep 0.1; done
  for round in $(seq 1 "$rounds"); do
    for mode in tcp rdma; do
      out="$T2R_WORK/bench-$mode-$round.out"
      if [ $mode = tcp ]; then
        redis-benchmark -h "$T2R_PEER" -p 6391 -c 50 -n 40000 -t set,get > "$out" 2>&1
      else
        env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$T2R_WORK/shim-client.log" \
          redis-benchmark -h "$T2R_PEER" -p 6390 -c 50 -n 40000 -t set,get > "$out" 2>&1
      fi
      # redis-benchmark's summaries: "throughput summary: N requests per second" and the latency line.
      tr '\r' '\n' < "$out" | awk -v r="$round" -v m="$mode" '
        /^====== / { test = $2 }
        /throughput summary/ { rps = $3 }
        /latency summary/ { getline; getline; printf "result round=%s mode=%s %s rps=%s avg=%s p50=%s p99=%s max=%s (ms)\n", r, m, test, rps, $1, $3, $5, $6 }'
      tr '\r' '\n' < "$out" | grep -i "error" | head -3
    done
  done
  echo "result client on_rdma=$(count 'upgraded to rdma' "$T2R_WORK/shim-client.log") back_on_tcp=$(count 'back on tcp' "$T2R_WORK/shim-client.log") failed=$(count 'failed\|reset' "$T2R_WORK/shim-client.log") stays_tcp=$(count 'stays tcp' "$T2R_WORK/shim-client.log")"
  touch "$T2R_WORK/done"
  sleep 3  # the server's summary comes after the done file
fi
