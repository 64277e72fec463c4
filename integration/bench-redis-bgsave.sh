#!/usr/bin/env bash
# bench-redis-bgsave.sh [ROUNDS]: redis forking for snapshots under load, the fork target of
# docs/architecture.md ("Forks"). In the pair VMs, two redis servers with their built-in snapshot
# settings on A (6390 under the module, BENCH_RULES default integration/rules/redis-rdma.yaml; 6391
# without it, the reference) each get a BGSAVE every 2 s while redis-benchmark -c 50 -n 40000
# -t set,get runs on B against each in turn, ROUNDS times (default 2). Reported: requests per second
# and latency (avg, p50, p99, max) per test and mode, the forks each server made, and what both ends'
# logs say of the connections (on RDMA, moved back to TCP, failed). Every connection must stay on
# RDMA through the forks, with no error. BENCH_BGSAVE_EVERY=0 runs the same without any BGSAVE: what
# the forks add to the latencies is the difference. Figures with date and machine go to
# docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-2}
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
rules=$(realpath "${BENCH_RULES:-$root/integration/rules/redis-rdma.yaml}")  # the guests run elsewhere
out=$(mktemp)
trap 'rm -f "$out"' EXIT
every=${BENCH_BGSAVE_EVERY:-2}
run="sh $root/integration/guest/bench-bgsave-run.sh $lib $rules"
set +e
"$root/integration/vm" pair --timeout 1800 --share "$(dirname "$(dirname "$lib")")" "$run server $rounds $every" \
  "$run client $rounds $every" > "$out" 2>&1
status=$?
set -e
echo "bench-redis-bgsave: redis-benchmark -c 50 -n 40000 -t set,get with a BGSAVE every $every s (0: none), two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), commit $(git -C "$root" rev-parse --short HEAD), host $(nproc) cores"
grep -E '^\[[ab]\] (result|.*[Ee]rror)' "$out" | sed 's/^\[[ab]\] //'
if [ $status -ne 0 ]; then
  echo "bench-redis-bgsave: the run failed (status $status); its output:" >&2
  tail -n 60 "$out" >&2
  exit $status
fi
