#!/bin/sh
# bench-nginx-client.sh SHIM RULES: the client guest's half of integration/bench-nginx.sh. Waits for
# the server's workers, then runs wrk under the module against port 5029 (TCP) and 5019 (RDMA by the
# rules) for ROUNDS rounds, each with keep-alive and then with `Connection: close`, SECONDS_EACH
# (default 5) a run. Prints a "result" line per run: requests per second, socket errors and timeouts
# as wrk counts them, the connections its log shows upgraded and staying TCP (and of those, how many
# at once because the server refused lately: preload/upgrade/refusals.h).
set -u
shim=$1 rules=$2
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/wait-servers.sh" || exit 1
sleep 1  # the workers' RDMA listeners are made at their first epoll registration
run() { # PORT MODE CONNECTIONS [wrk options...]
  port=$1 mode=$2 c=$3
  shift 3
  log=/tmp/bench-nginx-$port-$mode.log
  : > "$log"
  out=$(env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" wrk -t2 -c"$c" -d"${SECONDS_EACH:-5}"s "$@" "http://$T2R_PEER:$port/small" 2>&1)
  rps=$(echo "$out" | awk '/^Requests\/sec:/ {print $2}')
  errors=$(echo "$out" | grep -o 'Socket errors:.*' || echo 'Socket errors: none')
  echo "result port=$port mode=$mode connections=$c rps=${rps:--} on_rdma=$(grep -c 'upgraded to rdma' "$log") on_tcp=$(grep -c 'stays tcp' "$log") refused_lately=$(grep -c 'refused RDMA lately' "$log") $errors"
  grep -o 'stays tcp (.*' "$log" | sed 's/ ([0-9]* ms)//; s/asked again in [0-9]* ms/asked again later/' | sort | uniq -c | sort -rn | head -3 | sed 's/^/  why: /'
}
for r in $(seq "${ROUNDS:-3}"); do
  run 5029 keepalive 32
  run 5019 keepalive 32
  run 5029 close 8 -H 'Connection: close'
  run 5019 close 8 -H 'Connection: close'
done
