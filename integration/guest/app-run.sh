#!/bin/sh
# app-run.sh MIN_UPGRADED MIN_PACKETS CMD [ARG...]: runs CMD under the shim (T2R_SHIM, rules in
# TCP2RDMA_RULES) and succeeds only if it succeeded, its shim log gained at least MIN_UPGRADED
# "upgraded to rdma" lines, rxe sent and received at least MIN_PACKETS packets meanwhile, and (when
# T2R_EXPECT_OUTPUT is set) its output matches that extended regular expression.
set -eu
here=$(dirname "$0")
min_upgraded=$1 min_pkts=$2; shift 2
log="$T2R_WORK/shim-$T2R_HOST.log"
pkts() { "$here/rdma-counters" | awk '$1=="sent_pkts"||$1=="rcvd_pkts"{n+=$2} END{print n}'; }
count() { grep -c 'upgraded to rdma' "$log" 2>/dev/null || true; }
before=$(pkts); upgraded_before=$(count)
env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" "$@" > /tmp/app.out 2>&1 || { cat /tmp/app.out; echo "app-run: $1 failed"; exit 1; }
cat /tmp/app.out
moved=$(( $(pkts) - before )); upgraded=$(( $(count) - ${upgraded_before:-0} ))
echo "app-run: $1: $upgraded connections upgraded, $moved RDMA packets"
[ "$upgraded" -ge "$min_upgraded" ] || { cat "$log"; echo "app-run: fewer than $min_upgraded upgraded"; exit 1; }
[ "$moved" -ge "$min_pkts" ] || { echo "app-run: fewer than $min_pkts RDMA packets"; exit 1; }
if [ -n "${T2R_EXPECT_OUTPUT:-}" ]; then
  grep -E -q "$T2R_EXPECT_OUTPUT" /tmp/app.out || { echo "app-run: no output line matches '$T2R_EXPECT_OUTPUT'"; exit 1; }
fi
