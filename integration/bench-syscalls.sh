#!/usr/bin/env bash
# bench-syscalls.sh [CLIENTS] [ROUNDS]: system calls per request of redis GETs through two event loops
# (redis-server and redis-benchmark, one Soft-RoCE VM), on kernel TCP and on RDMA under the module
# (BENCH_RULES, default integration/rules/redis-before-return.yaml: every connection on RDMA before its
# first byte). Each end runs under `strace -f -c`, twice (2000 and 6000 GETs); the difference over
# 4000 is what a request costs with the setup taken out. Counts, not times: they carry over to a real
# NIC, where each system call or wakeup the module adds eats the RDMA round trip's lead over TCP (on
# Soft-RoCE a send's doorbell is one write(), on mlx5 none). BENCH_TOPOLOGY=pair puts the server in
# one VM and the client in the other (a send then completes a link's round trip after it was posted,
# as on a real NIC, where in one guest rxe completes it almost at once). Figures go to
# docs/benchmarks.md. BENCH_TRACER=perf counts with perf trace instead of strace (no stop at each call:
# a timed busy poll runs as it would untraced).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
clients=${1:-8}
rounds=${2:-3}
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
rules=$(realpath "${BENCH_RULES:-$root/integration/rules/redis-before-return.yaml}")  # the guest runs elsewhere
out=$(mktemp)
trap 'rm -f "$out"' EXIT
topology=${BENCH_TOPOLOGY:-loop}
run="BENCH_TRACER=${BENCH_TRACER:-strace} sh $root/integration/guest/bench-syscalls-run.sh $lib $rules $clients 2000 6000 $rounds"
set +e
case $topology in
  loop)
    where="one Soft-RoCE VM (2 GiB, 1 vCPU)"
    "$root/integration/vm" loop --timeout 3000 --share "$(dirname "$(dirname "$lib")")" "$run" > "$out" 2>&1 ;;
  pair)
    where="server and client in two Soft-RoCE VMs (1 GiB, 1 vCPU each)"
    "$root/integration/vm" pair --timeout 3000 --share "$(dirname "$(dirname "$lib")")" "$run server" "$run client" > "$out" 2>&1 ;;
  *) echo "BENCH_TOPOLOGY is loop or pair" >&2; exit 2 ;;
esac
status=$?
set -e
echo "bench-syscalls: redis-benchmark -t get -c $clients, system calls per request (${BENCH_TRACER:-strace}, 6000 less 2000 GETs), $where, rules $(basename "$rules"), $(date -u +%F), commit $(git -C "$root" rev-parse --short HEAD), host $(nproc) cores"
grep -E '^(\[[ab]\] )?(result|  (server|client):)' "$out" | sed -E 's/^\[([ab])\] /\1: /' || true
if [ $status -ne 0 ]; then
  echo "bench-syscalls: the VM run failed ($status):"
  tail -40 "$out"
  exit 1
fi
