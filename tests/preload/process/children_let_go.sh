#!/bin/sh
# children_let_go.sh SHIM RULES a|b: integration.children_let_go.pair. Two connections on RDMA (rules
# before-return) go back to TCP when a forked process uses them, and back to RDMA once no other
# process holds them (docs/architecture.md, "Back to RDMA"):
#  - socat TCP-LISTEN:5012,fork EXEC:cat: its worker child uses the connection its parent accepted
#    (lent, then claimed: back on TCP), then forks the child that execs cat with pipes, which holds
#    none of it; the worker carries the bytes between the connection and cat;
#  - child_uses_once.py on 5015: the parent's child writes once and exits; the parent echoes.
# paced_client.py sends 64 KiB every 0.1 s for 12 s to each at once: every byte echoed in order, and
# each connection back on RDMA at both ends while it runs. Before, the worker's and the parent's
# connections stayed on TCP for good ("another process may hold the connection").
set -u
shim=$1 rules=$2 role=$3
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
run() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" "$@"; }
if [ "$role" = a ]; then
  run socat -d -d TCP-LISTEN:5012,fork,reuseaddr EXEC:cat 2> "$T2R_WORK/server-5012.err" &
  run python3 "$here/child_uses_once.py" 5015 2> "$T2R_WORK/server-5015.err" &
  until [ -f "$T2R_WORK/clients-done" ]; do sleep 0.2; done
  kill %1 2>/dev/null
  grep 'back on\|other process\|stays' "$log" | sed 's/^/children-let-go server:   /'
  alone=$(grep -c 'no other process holds the connection any more' "$log")
  back=$(grep -c 'back on rdma' "$log")
  echo "children-let-go server: $alone connections alone again, $back back on rdma"
  [ "$alone" -ge 2 ] && [ "$back" -ge 2 ]
  exit
fi
sh "$guest/wait-listening.sh" "$T2R_WORK/server-5012.err" 'listening on' && sh "$guest/wait-listening.sh" "$T2R_WORK/server-5015.err" || exit 1
status=0
run python3 "$here/paced_client.py" "$T2R_PEER" 5012 12 > /tmp/client-5012.out 2>&1 &
run python3 "$here/paced_client.py" "$T2R_PEER" 5015 12 child > /tmp/client-5015.out 2>&1 || status=1
wait $! || status=1
cat /tmp/client-5012.out /tmp/client-5015.out
touch "$T2R_WORK/clients-done"
grep 'back on' "$log" | sed 's/^/children-let-go client:   /'
back=$(grep -c 'back on rdma' "$log")
echo "children-let-go client: $back connections back on rdma"
[ "$back" -ge 2 ] || status=1
sleep 2  # guest a reads the logs
exit $status
