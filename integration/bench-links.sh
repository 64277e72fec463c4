#!/usr/bin/env bash
# bench-links.sh [N] [BYTES]: many connections at once between two processes, the links' measure
# (docs/links.md). Two Soft-RoCE VMs (1 GiB each): on A an asyncio echo server under the module
# (tests/preload/stress_echo.py, rules integration/rules/stress.yaml: port 5030 upgrades in the
# background, 5031 before connect() returns on the client); on B one asyncio process opens N
# connections at once (default 1000), echoes BYTES (default 65536) through each and, with all of them
# still open, measures itself (integration/guest/hold_connections.py). Three runs: without the module
# (kernel TCP: the reference for time), background, before-return. Reported per run: the time for all
# N, how many went on RDMA and why the others did not (the client's log), setup time p50/p90/max (the
# log's "setup N ms"), pinned memory (VmPin), queue pairs and descriptors of the process, and rxe's
# packets. BENCH_MODES chooses the runs (default "tcp background before-return"; before-return waits
# out one setup per connection and takes minutes); BENCH_RULES the rule file (default
# integration/rules/stress.yaml, the default rings; integration/rules/many.yaml has 64 KiB rings and a
# 60 s wait for a request, on the same ports). Figures with date and machine go to docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:-1000}
bytes=${2:-65536}
. "$root/integration/testbed/bench-pair.sh"
bench_module_and_rules "$root/integration/rules/stress.yaml"
py="python3 $root/tests/preload/stress_echo.py"
title="bench-links: $n connections at once, $bytes bytes echoed each, rules $(basename "$rules"), two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), host $(nproc) cores"
bench_pair bench-links "background '$py server 5030' listening before-return '$py server 5031' listening" \
  "MODES='${BENCH_MODES:-tcp background before-return}' sh $root/integration/guest/bench-links-client.sh $lib $rules $n $bytes"
