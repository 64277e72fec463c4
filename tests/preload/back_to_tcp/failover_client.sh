#!/bin/sh
# failover_client.sh SHIM RULES KIND SECONDS SPEC...: the client guest's half of
# integration.failover_*.pair. failover_echo.py's client under the module opens the connections SPEC
# says (PORT:BULK:IDLE[:THREADED], rules/failover.yaml: 5040 background, 5041 before-return), writes
# for SECONDS on the bulk ones and checks every byte of every echo; 4 s in, both guests' fault agents
# break the RDMA path (fault_agent.sh KIND). Then:
#  - every connection was upgraded to RDMA and carried traffic there (rxe's sent_pkts grew);
#  - KIND wire: every bulk connection went on over TCP after its path failed (the shim's log line,
#    which says how many bytes each side sent again), the path's failure is rxe's too (its
#    retry_exceeded_err grew), every bulk connection went back to RDMA once the path answered again,
#    and every echo is exact: the application saw nothing but a pause;
#  - KIND kill (the server was killed during the outage) and kill-after-record (killed after its
#    failover records went out, fault_agent.sh): each connection ended with a reset, after bytes that
#    were all right, never a clean end, and none went on over TCP.
set -u
shim=$1 rules=$2 kind=$3 seconds=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
# In a sanitized run (ASAN_OPTIONS set, docs/testbed.md) python3's own memory left at exit is not the
# module's: leak checking stays with the instrumented test programs.
[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
sh "$guest/wait-listening.sh" "$T2R_WORK/server.err" || exit 1
sh "$here/fault_agent.sh" "$kind" &
counter() { "$guest/rdma-counters" | awk -v n="$1" '$1 == n { print $2 }'; }
sent0=$(counter sent_pkts) retry0=$(counter retry_exceeded_err)
expect=""; [ "${kind%%-*}" = kill ] && expect=--expect-reset
env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" TCP2RDMA_LOG_TIME=1 \
  python3 "$here/failover_echo.py" client "$T2R_PEER" "$seconds" 4 "$T2R_WORK/uncut-a,$T2R_WORK/uncut-b" "$@" $expect
status=$?
wait
sent=$(( $(counter sent_pkts) - sent0 )) retries=$(( $(counter retry_exceeded_err) - retry0 ))
conns=0 bulk=0 on_5040=0 threaded=0
for spec in "$@"; do
  port=${spec%%:*} rest=${spec#*:}
  b=${rest%%:*} rest=${rest#*:}
  i=${rest%%:*} t=0
  [ "$rest" = "$i" ] || t=${rest#*:}
  conns=$((conns + b + i + t)) bulk=$((bulk + b)) threaded=$((threaded + t))
  [ "$port" = 5040 ] && on_5040=$((on_5040 + b + i + t))
done
upgraded=$(grep -c 'upgraded to rdma' "$log")
failed_over=$(grep -c 'back on tcp (rdma path failed' "$log")
reset=$(grep -c 'reset (rdma path failed' "$log")
echo "failover-client: $upgraded of $conns connections upgraded; $failed_over went on over TCP after their path failed, $reset were reset; rxe: sent_pkts +$sent, retry_exceeded_err +$retries"
grep 'rdma path failed' "$log" | sed 's/^/failover-client:   /'
[ "$upgraded" -eq "$conns" ] && [ "$sent" -ge 100 ] || status=1
if [ "${kind%%-*}" = kill ]; then
  [ "$failed_over" -eq 0 ] || status=1
else
  [ "$failed_over" -ge $((bulk + threaded)) ] && [ "$retries" -ge 1 ] || status=1
  # Idle connections on 5040 (rules/failover.yaml: a probe every second) notice the outage themselves:
  # the path watcher probes them, as nothing of the application's does.
  idle=$(grep "5040: .*back on tcp (rdma path failed" "$log" | grep -c . )
  echo "failover-client: $idle of the $on_5040 connections to port 5040 failed over (bulk and idle)"
  [ "$idle" -eq "$on_5040" ] || status=1
  # Once the path answers again, the connections in use go back to RDMA (return_plan.h: the first
  # attempt 1 s after the failover), the echoes still exact: every bulk one of the event loop, which
  # writes to the end. A threaded one returns only at a moment its reader is not inside recv() (its
  # echoes are exact either way: a return never starts under a kernel call).
  back=$(grep -c 'back on rdma' "$log")
  echo "failover-client: $back connections went back to RDMA after the outage"
  grep -E 'back on rdma|still on tcp|for good' "$log" | sed 's/^/failover-client:   /'
  [ "$back" -ge "$bulk" ] || status=1
fi
exit $status
