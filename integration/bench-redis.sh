#!/usr/bin/env bash
# bench-redis.sh [N] [CLIENTS...]: redis-benchmark against a redis server in the pair VMs, the measure
# of the links' "redis-benchmark -c 1000" target (docs/links.md). On A two redis servers (Debian's
# redis-tools binary, as integration.redis_over_rdma.pair runs it): one on port 6390 under the
# module, one on port 6391 without it; on B `redis-benchmark -n N -t set,get -c C` for each C of
# CLIENTS (default 50 1000), first without the module against 6391 (kernel TCP at both ends: the
# reference), then under it against 6390 (BENCH_RULES, default integration/rules/redis-bench.yaml:
# both ends upgrade in the background; a server whose rules upgrade before accept() returns would
# make a plain client wait for a request that never comes). Reported per run:
# requests per second of SET and GET,
# the connections the client's log shows on RDMA and on TCP (and why), and rxe's packets. A server
# restarted between runs is not needed: each run's connections are new. Figures with date and
# machine go to docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:-200000}
shift || true
clients=${*:-50 1000}
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
rules=$(realpath "${BENCH_RULES:-$root/integration/rules/redis-bench.yaml}")  # the guests run elsewhere
out=$(mktemp)
trap 'rm -f "$out"' EXIT
redis_args="--bind 10.77.0.1 --protected-mode no --save \"\" --appendonly no --dir /tmp --maxclients 20000"
server="ulimit -Hn 1048576; ulimit -Sn 65536; ln -sf /usr/bin/redis-check-rdb /tmp/redis-server; env T2R_SHIM=$lib TCP2RDMA_RULES=$rules sh $root/integration/guest/app-servers.sh redis '/tmp/redis-server --port 6390 $redis_args' 'Ready to accept connections' redis-tcp 'env -u LD_PRELOAD /tmp/redis-server --port 6391 $redis_args' 'Ready to accept connections'"
client="CLIENTS='$clients' sh $root/integration/guest/bench-redis-client.sh $lib $rules $n"
set +e
"$root/integration/vm" pair --timeout 3000 --share "$(dirname "$(dirname "$lib")")" "$server" "$client" > "$out" 2>&1
status=$?
set -e
echo "bench-redis: redis-benchmark -n $n -t set,get, clients $clients, two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), host $(nproc) cores"
grep -E '^\[b\] (result|  why)' "$out" | sed 's/^\[b\] //'
if [ $status -ne 0 ]; then
  echo "bench-redis: the run failed (status $status); its output:" >&2
  tail -n 60 "$out" >&2
  exit $status
fi
