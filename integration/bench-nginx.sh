#!/usr/bin/env bash
# bench-nginx.sh [ROUNDS]: nginx as deployed under a load tool, in the pair VMs. On A nginx
# (integration/nginx/bench.conf: two workers as nobody) under the module, on port 5019, which the rules
# put on RDMA (integration/rules/server-background.yaml), and on port 5029, which they keep on TCP: the
# reference, same server, same run. On B wrk under the module (2 threads, 32 keep-alive connections,
# BENCH_SECONDS long, default 5), then with `Connection: close` (8 connections, as long: a connection
# per request), alternating the two ports, for ROUNDS rounds (default 3).
# BENCH_SERVER_MEMLOCK=0 starts nginx under `ulimit -l 0`: its workers (no CAP_IPC_LOCK as nobody) can
# register no memory, so every switch fails (the server declines it): the measure of "a failed switch
# costs nothing" (within 3 % of the TCP port). Each line: port, mode, requests per second, wrk's socket
# errors and timeouts, connections upgraded and staying TCP on both ends; at the end the server's
# switches: how long each took, from the RDMA connection established to the connection on it (its
# log's "switch N ms"), p50, p99 and max.
# Figures with date and machine go to docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/integration/testbed/bench-pair.sh"
rounds=${1:-3}
bench_module_and_rules "$root/integration/rules/server-background.yaml"
memlock=${BENCH_SERVER_MEMLOCK:-unlimited}
title="bench-nginx: nginx 2 workers as nobody (memlock $memlock), wrk -t2 for ${BENCH_SECONDS:-5} s a run; two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), host $(nproc) cores, commit $(git -C "$root" rev-parse --short HEAD)"
bench_pair bench-nginx \
  "nginx 'nginx -e stderr -c $root/integration/nginx/bench.conf' 'start worker process'" \
  "ROUNDS=$rounds SECONDS_EACH=${BENCH_SECONDS:-5} sh $root/integration/guest/bench-nginx-client.sh $lib $rules" \
  "mkdir -p /tmp/www && head -c 1000 /dev/urandom > /tmp/www/small && touch \$T2R_WORK/shim-a.log && chmod 666 \$T2R_WORK/shim-a.log && ulimit -l $memlock" \
  "echo \"server log: \$(grep -c 'upgraded to rdma' \$T2R_WORK/shim-a.log) upgraded, \$(grep -c 'stays tcp' \$T2R_WORK/shim-a.log) stayed tcp\"; grep -o 'stays tcp (.*' \$T2R_WORK/shim-a.log | sed 's/ ([0-9]* ms)//' | sort | uniq -c | sort -rn | head -3 | sed 's/^/server why: /'; grep -o 'switch [0-9]* ms)' \$T2R_WORK/shim-a.log | tr -dc '0-9\\n' | sort -n | awk '{v[NR]=\$1} END {if (NR) {i=int(NR*0.99+0.5); if (i<1) i=1; printf \"server switch: %d switches took p50 %d ms, p99 %d ms, max %d ms (established to on RDMA)\\n\", NR, v[int((NR+1)/2)], v[i], v[NR]}}'"
