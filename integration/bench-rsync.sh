#!/usr/bin/env bash
# bench-rsync.sh [ROUNDS] [SIZE]: rsync's daemon with its bulk on RDMA (docs/benchmarks.md, "Servers
# as deployed"). Two Soft-RoCE VMs: on A two `rsync --daemon`s run as nobody, one under the module on
# port 5016 (rules integration/rules/server-background.yaml: the daemon's children take their upgrades
# up in the background, the client's connect() returns on RDMA), one without it on 5098 (kernel TCP,
# the reference, same run); on B rsync pulls a tree of SIZE bytes (default 8 MiB) from each and pushes
# one to each, ROUNDS times (default 3), alternating. Each receiving side forks its generator and its
# receiver: the module's transfers go through a read relay (docs/architecture.md, "Forks"). Prints
# each transfer's time, rxe's packets and the relays; figures with date and machine go to
# docs/benchmarks.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-3}
size=${2:-8388608}
lib=${TCP2RDMA_LIB:-$root/build/preload/libtcp2rdma.so}
[ -f "$lib" ] || { echo "no $lib: build first (integration/test-all or cmake --build build)" >&2; exit 1; }
rules=$root/integration/rules/server-background.yaml
run="sh $root/integration/guest/bench-rsync-run.sh $lib $rules $rounds $size"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "bench-rsync: $rounds rounds of a pull and a push of an $size-byte tree, rsync --daemon as nobody," \
  "kernel TCP (port 5098) against the module (5016, $(basename "$rules")); two Soft-RoCE VMs, $(date -u +%F)," \
  "host $(nproc) cores, commit $(git -C "$root" rev-parse --short HEAD)"
status=0
"$root/integration/vm" pair --timeout 900 --share "$(dirname "$(dirname "$lib")")" "$run a" "$run b" > "$out" 2>&1 ||
  status=$?
grep -E '^\[b\] (result|failed)' "$out" | sed 's/^\[b\] //'
if [ $status -ne 0 ]; then
  echo "bench-rsync: the run failed (status $status); its output:" >&2
  tail -n 40 "$out" >&2
fi
exit $status
