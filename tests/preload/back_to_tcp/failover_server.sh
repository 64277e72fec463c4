#!/bin/sh
# failover_server.sh SHIM RULES KIND: the server guest's half of integration.failover_*.pair
# (failover_client.sh): failover_echo.py's epoll echo server under the module on ports 5040 and 5041
# (rules/failover.yaml), and this guest's fault agent (fault_agent.sh KIND). It runs until the client
# guest is done; then the server must still be alive (KIND kill: must have been killed), and the
# shim's log must show a connection carried on over TCP after its RDMA path failed, and one that went
# back to RDMA after (kill: none).
# KIND kill-after-record: see fault_agent.sh.
set -u
shim=$1 rules=$2 kind=$3
here=$(cd "$(dirname "$0")" && pwd)
log=$T2R_WORK/shim-$T2R_HOST.log
# In a sanitized run (ASAN_OPTIONS set, docs/testbed.md) python3's own memory left at exit is not the
# module's: leak checking stays with the instrumented test programs.
[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
sh "$here/fault_agent.sh" "$kind" &
env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" TCP2RDMA_LOG_TIME=1 \
  python3 "$here/failover_echo.py" server 5040 5041 > "$T2R_WORK/server.out" 2> "$T2R_WORK/server.err" &
server=$!
until [ -f "$T2R_WORK/exit-b" ]; do sleep 0.5; done
status=0
cat "$T2R_WORK/server.out"
if [ "${kind%%-*}" = kill ]; then
  if kill -0 $server 2>/dev/null; then echo "failover-server: the server was never killed"; status=1; fi
elif kill -0 $server 2>/dev/null; then
  kill $server
  n=$(grep -c 'back on tcp (rdma path failed' "$log")
  back=$(grep -c 'back on rdma' "$log")
  echo "failover-server: $n connections carried on over TCP after their RDMA path failed, $back went back to RDMA"
  [ "$n" -ge 1 ] && [ "$back" -ge 1 ] || status=1
else
  echo "failover-server: the server died:"; cat "$T2R_WORK/server.err"; status=1
fi
wait
exit $status
