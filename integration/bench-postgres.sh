#!/usr/bin/env bash
# bench-postgres.sh [ROUNDS]: PostgreSQL 15 under pgbench, in the pair VMs. On A two clusters, each a
# postmaster as postgres under the module (integration/guest/postgres.sh): port 5018, which the rules
# put on RDMA (integration/rules/server-background.yaml: a backend per connection takes up the upgrade
# its postmaster's fork interrupted), and port 5028, which they keep on TCP: the reference, same
# server, same module, same run. On B pgbench under the module, -c CLIENTS (default 8) -j 2 for
# BENCH_SECONDS (default 10) a run, the two ports in turn, for ROUNDS rounds (default 3). Each line:
# round, port, transactions per second, average latency; then the balances of both databases and the
# connections upgraded and staying TCP on both ends (BENCH_KEEP=1 keeps the guests' work directory,
# its logs). Figures with date and machine go to docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/integration/testbed/bench-pair.sh"
rounds=${1:-3}
bench_module_and_rules "$root/integration/rules/server-background.yaml"
pg="sh $root/integration/guest/postgres.sh"
clients=${BENCH_CLIENTS:-8}
# The guests' work directory, where the shim's logs go: open to the postgres user, which the
# postmaster runs as from its start (mktemp's 0700 would keep its log out).
work=$(mktemp -d /var/tmp/bench-postgres.XXXXXX)
chmod 755 "$work"
if [ -n "${BENCH_KEEP:-}" ]; then
  trap 'echo "bench-postgres: the guests'"'"' work directory: $work" >&2' EXIT
else
  trap 'rm -rf "$work"' EXIT
fi
logged() { # HOST: what its shim's log says of the connections
  echo "\$(grep -c 'upgraded to rdma' \$T2R_WORK/shim-$1.log) upgraded, \$(grep -c 'stays tcp' \$T2R_WORK/shim-$1.log) stayed tcp"
}
title="bench-postgres: PostgreSQL 15, pgbench -c $clients -j 2 for ${BENCH_SECONDS:-10} s a run, scale 1; two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), host $(nproc) cores, commit $(git -C "$root" rev-parse --short HEAD)"
bench_pair bench-postgres \
  "rdma '$pg server 5018' 'ready to accept connections' tcp '$pg server 5028' 'ready to accept connections' > /dev/null" \
  "sh $root/integration/guest/wait-servers.sh && env LD_PRELOAD=$lib TCP2RDMA_RULES=$rules TCP2RDMA_LOG=\$T2R_WORK/shim-b.log $pg rounds 10.77.0.1 $clients ${BENCH_SECONDS:-10} $rounds 5028 5018; echo \"client log: $(logged b)\"" \
  "$pg init 5018 && $pg init 5028 && touch \$T2R_WORK/shim-a.log && chmod 666 \$T2R_WORK/shim-a.log" \
  "echo \"server log: $(logged a)\""
