#!/bin/sh
# refused-client.sh HOST PORT N: the client guest's half of integration.refused_server.pair. N short
# connections one after another (short_connections.py, 64 KiB echoed exactly through each) under the
# module, whose rules put them on RDMA, to a server without tcp2rdma. The client's log must show at
# most 5 RDMA attempts (the refusal remembered 1 s, then 2 s, 4 s... : preload/upgrade/refusals.h) and
# every other connection staying TCP at once.
set -eu
here=$(dirname "$0")
log="$T2R_WORK/shim-$T2R_HOST.log"
env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" SHORT_KEEP=0 python3 "$here/short_connections.py" "$1" "$2" "$3" 65536
attempts=$(grep -c 'no tcp2rdma listener' "$log" || true)
lately=$(grep -c 'refused RDMA lately' "$log" || true)
echo "refused-client: $3 connections: $attempts RDMA attempts, $lately stayed TCP at once"
[ "$attempts" -ge 1 ] && [ "$attempts" -le 5 ] || { cat "$log"; echo "refused-client: 1 to 5 attempts expected"; exit 1; }
[ $((attempts + lately)) -eq "$3" ] || { cat "$log"; echo "refused-client: some connection stayed TCP otherwise"; exit 1; }
