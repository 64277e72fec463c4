#!/usr/bin/env bash
# bench-short.sh [N] [BYTES] [PROCESSES]: short-lived connections, the links' second measure
# (docs/links.md, "Short-lived connections"). Two Soft-RoCE VMs (1 GiB each): on A an asyncio echo
# server under the module (tests/preload/stress_echo.py, rules integration/rules/stress.yaml: port
# 5030 upgrades in the background, 5031 before connect() returns on the client); on B one process
# makes N connections one after another (default 200), each echoing BYTES (default 65536) and closed,
# while one more connection stays open (integration/guest/short_connections.py); then PROCESSES
# processes (default 10) make one connection each, as `curl` in a loop does. Runs: without the module
# (kernel TCP: the reference), background, before-return. Reported per run: time per connection
# p50/p90 and connections per second, the kept connection's round trip (kernel TCP's without the
# module, the module's with it), how many connections went on RDMA and how many of those moved every
# byte on RDMA, the upgrade's setup and switch times from connect(), rxe's packets. Figures with date
# and machine go to docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:-200}
bytes=${2:-65536}
processes=${3:-10}
. "$root/integration/testbed/bench-pair.sh"
bench_module_and_rules "$root/integration/rules/stress.yaml"
py="python3 $root/tests/preload/stress_echo.py"
title="bench-short: $n connections one after another ($bytes bytes echoed each, one more held open), then $processes processes of one connection each; rules $(basename "$rules"), two Soft-RoCE VMs (1 GiB, 1 vCPU each), $(date -u +%F), host $(nproc) cores"
bench_pair bench-short "background '$py server 5030' listening before-return '$py server 5031' listening" \
  "sh $root/integration/guest/bench-short-client.sh $lib $rules $n $bytes $processes"
