#!/bin/sh
# short_connections.sh SHIM RULES PORT N: short-lived connections on a live link (docs/links.md,
# "Short-lived connections"), the client guest's half, after many_connections.sh in
# integration.many_connections.pair (the server guest runs an asyncio echo server under the module on
# PORT). One process holds a connection (its link to the server process) and makes N more one after
# another, each echoing 64 KiB and closed (integration/guest/short_connections.py). The rule's
# linked_wait lets connect() wait for the upgrade on the live link: every one of the N must be on RDMA
# with every byte on RDMA ("switched after 0 bytes sent and 0 received on tcp" in the client's log),
# every echo exact, and rxe must have carried them (at least N x 32 packets: 64 KiB each way).
set -eu
shim=$1 rules=$2 port=$3 n=$4
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST-short.log
[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"  # python3's, not ours
T2R_MIN_PKTS=$((n * 32)) env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" SHORT_WARMUP_S=1 \
  sh "$guest/expect-rdma" python3 "$guest/short_connections.py" "$T2R_PEER" "$port" "$n" 65536
on=$(grep -c 'upgraded to rdma' "$log" || true)
whole=$(grep -c 'switched after 0 bytes sent and 0 received on tcp' "$log" || true)
echo "short: $n connections one after another: $on of $((n + 1)) on RDMA, $whole with every byte on RDMA"
grep -o 'not on rdma after the linked wait.*\|stays tcp (.*' "$log" | sort | uniq -c | head -3
[ "$on" -eq $((n + 1)) ] || { echo "short: not every connection went on RDMA"; exit 1; }
[ "$whole" -ge "$n" ] || { echo "short: fewer than $n connections moved every byte on RDMA"; exit 1; }
