#!/bin/sh
# many_connections.sh SHIM RULES PORT N BYTES PERCENT: the client guest's half of
# integration.many_connections.pair (the server guest runs stress_echo.py's asyncio echo server under
# the module on PORT, upgrading in the background). One process opens N connections at once and
# echoes through each, before and after its upgrade (many_connections.py); at least PERCENT % of them
# must be on RDMA by the client's log and by the server's, every echo exact, and rxe must have carried
# the second echoes (at least N x 10 packets sent from here). Then write_first.py: three connections
# one after the other, each on RDMA, each sending 3 MiB whole before it reads the echo (rings of
# 64 KiB that cannot grow: the module must move the peer's bytes out of a full ring while its
# application waits to write), every echo exact, rxe carrying them.
set -eu
shim=$1 rules=$2 port=$3 n=$4 bytes=$5 percent=$6
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
server_log=$T2R_WORK/shim-a.log
want=$(( (n * percent + 99) / 100 ))
[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"  # python3's, not ours
sh "$guest/wait-servers.sh"
# The application's own connections need a soft limit above N; the module's descriptors go above it.
ulimit -Hn 1048576 2>/dev/null || true
ulimit -Sn $((n + 1024))
# Timed log lines (TCP2RDMA_LOG_TIME): a connection that failed can be followed at both ends.
T2R_MIN_PKTS=$((n * 10)) env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" TCP2RDMA_LOG_TIME=1 \
  sh "$guest/expect-rdma" python3 "$here/many_connections.py" "$T2R_PEER" "$port" "$n" "$bytes" "$log" "$want" 240
echo "many: why some stayed tcp (client):"
grep -o 'stays tcp (.*' "$log" | sed 's/ ([0-9]* ms)//' | sort | uniq -c | sort -rn | head -5
server=$(grep -c 'upgraded to rdma' "$server_log" || true)
echo "many: the server's log: $server upgraded, $(grep -c 'stays tcp' "$server_log" || true) stayed tcp"
[ "$server" -ge "$want" ] || { echo "many: the server upgraded $server, fewer than $want"; exit 1; }
echo "many: $n connections, at least $want on RDMA at both ends, every echo exact"
first_log=$T2R_WORK/shim-$T2R_HOST-write-first.log
T2R_MIN_PKTS=2000 env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$first_log" \
  sh "$guest/expect-rdma" python3 "$here/write_first.py" "$T2R_PEER" "$port" 3 3145728 "$first_log"
