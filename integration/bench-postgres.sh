#!/usr/bin/env bash
# bench-postgres.sh [ROUNDS]: PostgreSQL 15 under pgbench, in the pair VMs. On A two clusters, each a
# postmaster as postgres under the module (integration/guest/postgres.sh): port 5018, which the rules
# put on RDMA (integration/rules/server-background.yaml: a backend per connection takes up the upgrade
# its postmaster's fork interrupted), and port 5028, which they keep on TCP: the reference, same
# server, same module, same run. On B pgbench under the module, -c CLIENTS (default 8) -j 2 for
# BENCH_SECONDS (default 10) a run, the two ports in turn, for ROUNDS rounds (default 3). Each line:
# round, port, transactions per second, average latency; then the balances of both databases and the
# connections upgraded and staying TCP on both ends (BENCH_KEEP=1 keeps the guests' work directory,
# its logs). Figures with date and machine go to
# docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-3}
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
rules=$root/integration/rules/server-background.yaml
pg="sh $root/integration/guest/postgres.sh"
clients=${BENCH_CLIENTS:-8}
out=$(mktemp)
# The guests' work directory, where the shim's logs go: open to the postgres user, which the
# postmaster runs as from its start (mktemp's 0700 would keep its log out).
work=$(mktemp -d /var/tmp/bench-postgres.XXXXXX)
chmod 755 "$work"
if [ -n "${BENCH_KEEP:-}" ]; then
  trap 'rm -f "$out"; echo "bench-postgres: the guests'"'"' work directory: $work" >&2' EXIT
else
  trap 'rm -f "$out"; rm -rf "$work"' EXIT
fi
server="$pg init 5018 && $pg init 5028 && touch \$T2R_WORK/shim-a.log && chmod 666 \$T2R_WORK/shim-a.log && env T2R_SHIM=$lib TCP2RDMA_RULES=$rules sh $root/integration/guest/app-servers.sh rdma '$pg server 5018' 'ready to accept connections' tcp '$pg server 5028' 'ready to accept connections' > /dev/null; echo \"server log: \$(grep -c 'upgraded to rdma' \$T2R_WORK/shim-a.log) upgraded, \$(grep -c 'stays tcp' \$T2R_WORK/shim-a.log) stayed tcp\""
client="sh $root/integration/guest/wait-servers.sh && env LD_PRELOAD=$lib TCP2RDMA_RULES=$rules TCP2RDMA_LOG=\$T2R_WORK/shim-b.log $pg rounds 10.77.0.1 $clients ${BENCH_SECONDS:-10} $rounds 5028 5018; echo \"client log: \$(grep -c 'upgraded to rdma' \$T2R_WORK/shim-b.log) upgraded, \$(grep -c 'stays tcp' \$T2R_WORK/shim-b.log) stayed tcp\""
set +e
"$root/integration/vm" pair --work "$work" --timeout 1800 --share "$(dirname "$(dirname "$lib")")" "$server" "$client" > "$out" 2>&1
status=$?
set -e
echo "bench-postgres: PostgreSQL 15, pgbench -c $clients -j 2 for ${BENCH_SECONDS:-10} s a run, scale 1; two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), host $(nproc) cores, commit $(git -C "$root" rev-parse --short HEAD)"
grep -E '^\[b\] (result|postgres.sh|client log)' "$out" | sed 's/^\[b\] //'
grep -E '^\[a\] server log' "$out" | sed 's/^\[a\] //' || true
if [ $status -ne 0 ]; then
  echo "bench-postgres: the run failed (status $status); its output:" >&2
  tail -n 60 "$out" >&2
  exit $status
fi
