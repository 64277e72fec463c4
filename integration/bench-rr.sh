#!/usr/bin/env bash
# bench-rr.sh [ROUNDS]: request/response through real servers, kernel TCP against the module, in the
# pair VMs, same run. On A, under the module with integration/rules/server-background.yaml (servers
# switch in the background, clients before connect() returns): redis (port 5010), memcached (5011, 4
# threads, as nobody), sockperf's server (5012) and nginx (5019, two workers as nobody); the same
# programs without the module on 5020-5022 and, for nginx, the same server's port 5029, which no rule
# selects; and ib_send_lat's server. On B (integration/guest/bench-rr-client.sh), ROUNDS rounds
# (default 3) of: redis-benchmark SET and GET at -c 1, 8, 50 and 1000; memcslap get and set, 8
# threads; wrk -t2 -c32 keep-alive; sockperf ping-pong and under-load, 64 B; ib_send_lat 64 B. Each
# load runs without the module against the TCP port and under it against the RDMA port.
# Prints every run's line, then a table: for each load the rate's min/median/max over the rounds on
# each path, the ratio of the medians (RDMA / TCP), and the medians of p50 and p99 (microseconds); a
# stall shows as a spread. BENCH_CALLS=1 adds, after the rounds, both ends' system calls a request
# (perf trace -s of one more run of redis GET -c 8, memcslap get, wrk and sockperf's ping-pong, blocking and in poll(), on each
# path, the client's with its setup, the server's processes' during the run:
# guest/bench-calls-server.sh); redis's with the setup left out are bench-syscalls.sh's.
# BENCH_LOADS=REGEX counts only the loads whose name matches (redis-get-c8, memcslap-get-c8,
# nginx-wrk-c32, sockperf-pp-64B, sockperf-pp-poll-64B: its client waiting in poll); BENCH_CALLS_ALL=1 lists every call, not the four commonest.
# Figures with date, commit and machine go to docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/integration/testbed/bench-pair.sh"
rounds=${1:-3}
bench_module_and_rules "$root/integration/rules/server-background.yaml"
title="bench-rr: request/response, kernel TCP (no module) against the module (rules $(basename "$rules")), $rounds rounds; two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), host $(nproc) cores, commit $(git -C "$root" rev-parse --short HEAD)"
redis_args="--bind 10.77.0.1 --protected-mode no --save \"\" --appendonly no --dir /tmp --maxclients 20000"
memcached_args="-t 4 -c 4096 -u nobody -U 0 -l 10.77.0.1"
# app-servers.sh waits for each server's READY in its output: memcached says nothing without -vv
# (which prints every command), so a line is echoed for it once it had a second to listen.
servers="redis '/tmp/redis-server --port 5010 $redis_args' 'Ready to accept' \
redis-tcp 'env -u LD_PRELOAD /tmp/redis-server --port 5020 $redis_args' 'Ready to accept' \
memcached 'sh -c \"(sleep 1; echo memcached up) & exec memcached $memcached_args -p 5011\"' 'memcached up' \
memcached-tcp 'env -u LD_PRELOAD sh -c \"(sleep 1; echo memcached up) & exec memcached $memcached_args -p 5021\"' 'memcached up' \
sockperf 'sockperf sr --tcp -i 10.77.0.1 -p 5012' 'Warmup stage' \
sockperf-tcp 'env -u LD_PRELOAD sockperf sr --tcp -i 10.77.0.1 -p 5022' 'Warmup stage' \
nginx 'nginx -e stderr -c $root/integration/nginx/bench.conf' 'start worker process' \
ib-send-lat 'env -u LD_PRELOAD sh -c \"echo ib up; while :; do ib_send_lat -d rxe0 -p 5402 -s 64 -n 2000 > /dev/null 2>&1; sleep 0.2; done\"' 'ib up'"
before="ln -sf /usr/bin/redis-check-rdb /tmp/redis-server && mkdir -p /tmp/www && head -c 1000 /dev/urandom > /tmp/www/small && touch \$T2R_WORK/shim-a.log && chmod 666 \$T2R_WORK/shim-a.log"
[ "${BENCH_CALLS:-0}" = 1 ] && before="$before && (sh $root/integration/guest/bench-calls-server.sh &)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
bench_pair bench-rr "$servers" "ROUNDS=$rounds BENCH_CALLS=${BENCH_CALLS:-0} BENCH_LOADS='${BENCH_LOADS:-.}' BENCH_CALLS_ALL=${BENCH_CALLS_ALL:-0} sh $root/integration/guest/bench-rr-client.sh $lib $rules" "$before" > "$out" || status=$?
cat "$out"
[ $status -eq 0 ] || exit $status
echo
echo "| load | TCP rate min / median / max | RDMA rate min / median / max | RDMA / TCP | p50 µs TCP / RDMA | p99 µs TCP / RDMA | on RDMA / stayed TCP (last round) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
# (no result line with 0 rounds: the calls alone)
{ grep '^result ' "$out" || true; } | awk '
  function field(name,   i, kv) { for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == name) return kv[2] } return "-" }
  function median(list,   n, v, i, j, t) {
    n = split(list, v, " "); if (n == 0) return "-"
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function spread(list,   n, v, i, lo, hi) {
    n = split(list, v, " "); if (n == 0) return "-"
    lo = hi = v[1]; for (i = 2; i <= n; ++i) { if (v[i] + 0 < lo + 0) lo = v[i]; if (v[i] + 0 > hi + 0) hi = v[i] }
    return lo " / " median(list) " / " hi
  }
  {
    t = field("test"); m = field("mode")
    if (!(t in seen)) { seen[t] = 1; order[++tests] = t }
    if (field("rate") != "-" && field("rate") != "") rate[t, m] = rate[t, m] " " field("rate")
    if (field("p50") != "-" && field("p50") != "") p50[t, m] = p50[t, m] " " field("p50")
    if (field("p99") != "-" && field("p99") != "") p99[t, m] = p99[t, m] " " field("p99")
    if (m == "rdma") conns[t] = field("on_rdma") " / " field("on_tcp")
  }
  END {
    for (k = 1; k <= tests; ++k) {
      t = order[k]
      tcp = median(rate[t, "tcp"]); rdma = median(rate[t, "rdma"])
      ratio = (tcp != "-" && rdma != "-" && tcp > 0) ? sprintf("%.2f", rdma / tcp) : "-"
      lat50 = median(p50[t, "tcp"]) " / " median(p50[t, "rdma"])
      if ((t, "ib_send_lat") in p50) lat50 = lat50 " (ib_send_lat " median(p50[t, "ib_send_lat"]) ")"
      printf "| %s | %s | %s | %s | %s | %s / %s | %s |\n", t, spread(rate[t, "tcp"]), spread(rate[t, "rdma"]), ratio,
        lat50, median(p99[t, "tcp"]), median(p99[t, "rdma"]), conns[t]
    }
  }'
