#!/bin/sh
# bench-syscalls-run.sh SHIM RULES CLIENTS SHORT LONG ROUNDS: the guest's half of
# integration/bench-syscalls.sh. For each round and each mode (tcp: no module; rdma: the module with
# RULES), redis-server and redis-benchmark -t get -c CLIENTS each run under `strace -f -c`, once for
# SHORT requests and once for LONG; the difference of the two runs' counts, over LONG - SHORT, is the
# system calls a request costs each end with the connections' setup and teardown taken out. Prints a
# "result" line per round and mode, and the calls that make up most of it.
set -u
shim=$1 rules=$2 clients=$3 short=$4 long=$5 rounds=$6
ln -sf /usr/bin/redis-check-rdb /tmp/redis-server
server_cmd="/tmp/redis-server --port 6390 --bind $T2R_SELF --protected-mode no --save '' --appendonly no --dir /tmp"

# strace's -c summary as "name calls" lines.
calls_of() {
  awk '$NF ~ /^[a-z_0-9]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { print $NF, $4 }' "$1"
}

# One run of N requests: both ends' counts in /tmp/sys-MODE-N-{server,client}.
one() { # MODE N [env...]
  mode=$1 n=$2
  shift 2
  rm -f /tmp/redis.out
  env "$@" TCP2RDMA_LOG=/tmp/shim-server.log strace -f -c -o /tmp/strace-server.txt sh -c "exec $server_cmd" > /tmp/redis.out 2>&1 &
  i=0
  until grep -q 'Ready to accept' /tmp/redis.out 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 600 ] || { echo "bench-syscalls: redis never became ready:"; cat /tmp/redis.out; exit 1; }
    sleep 0.1
  done
  env "$@" TCP2RDMA_LOG=/tmp/shim-client.log strace -f -c -o /tmp/strace-client.txt \
    redis-benchmark -h "$T2R_SELF" -p 6390 -c "$clients" -n "$n" -t get -q > /tmp/bench.out 2>&1
  pkill -TERM -x redis-server  # not -f: strace's own command line names it too
  wait
  calls_of /tmp/strace-server.txt > "/tmp/sys-$mode-$n-server"
  calls_of /tmp/strace-client.txt > "/tmp/sys-$mode-$n-client"
}

# The calls a request costs, per system call, from the two runs: "name per-request" lines, largest first.
per_request() { # MODE SIDE
  awk -v d=$((long - short)) 'FNR == NR { a[$1] = $2; next } { b[$1] = $2 }
       END { for (k in b) { x = (b[k] - a[k]) / d; if (x >= 0.05 || x <= -0.05) printf "%s %.2f\n", k, x } }' \
    "/tmp/sys-$1-$short-$2" "/tmp/sys-$1-$long-$2" | sort -k2 -rn
}

total() { awk '{ s += $2 } END { printf "%.2f", s }'; }
# The guest's clock is read by system calls (no vDSO clock under emulation); on a host with one they
# cost none: the totals are given without them too.
without_clock() { grep -v -E '^(gettimeofday|clock_gettime|time) '; }

for round in $(seq "$rounds"); do
  for mode in tcp rdma; do
    : > /tmp/shim-server.log; : > /tmp/shim-client.log
    if [ "$mode" = tcp ]; then
      one tcp "$short"; one tcp "$long"
    else
      one rdma "$short" LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
      one rdma "$long" LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
    fi
    server=$(per_request "$mode" server | total)
    client=$(per_request "$mode" client | total)
    server_nc=$(per_request "$mode" server | without_clock | total)
    client_nc=$(per_request "$mode" client | without_clock | total)
    echo "result round=$round mode=$mode clients=$clients server=$server client=$client" \
         "server_without_clock=$server_nc client_without_clock=$client_nc" \
         "on_rdma_server=$(grep -c 'upgraded to rdma' /tmp/shim-server.log)" \
         "on_rdma_client=$(grep -c 'upgraded to rdma' /tmp/shim-client.log)"
    echo "  server: $(per_request "$mode" server | head -8 | tr '\n' ' ')"
    echo "  client: $(per_request "$mode" client | head -8 | tr '\n' ' ')"
  done
done
