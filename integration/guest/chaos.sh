#!/bin/sh
# chaos.sh SHIM RULES a | SHIM RULES b KILL_AFTER THREADS ROUNDS: integration/soak-chaos's guest side.
# a serves chaos_echo.py under the module on 5013; b runs one client (THREADS x ROUNDS connections)
# and, unless KILL_AFTER is 0, a second one (16 threads) that it kills with SIGKILL after KILL_AFTER
# seconds; then 20 clean transfers, which must all be exact. Both log to the work directory.
set -u
shim=$1 rules=$2 side=$3
py="python3 $(dirname "$0")/chaos_echo.py"
run() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$T2R_WORK/shim-$T2R_HOST.log" TCP2RDMA_LOG_TIME=1 "$@"; }
if [ "$side" = a ]; then
  CHAOS_STOP=$T2R_WORK/stop run $py server 5013 3600 & job=$!
  server=$(i=0; until pgrep -f "chaos_echo.py server" || [ $i -ge 50 ]; do i=$((i+1)); sleep 0.1; done)
  until [ -e "$T2R_WORK/stop" ] || [ -e "$T2R_WORK/look" ] || ! kill -0 $server 2>/dev/null; do sleep 1; done
  if [ -e "$T2R_WORK/look" ] && kill -0 $server 2>/dev/null; then
    "$(dirname "$shim")/../tools/tcp2rdma" stat -a > "$T2R_WORK/server-stat-hang" 2>&1
    gdb -p $server -batch -ex "thread apply all bt" > "$T2R_WORK/server-stacks-hang" 2>&1
    until [ -e "$T2R_WORK/stop" ] || ! kill -0 $server 2>/dev/null; do sleep 1; done
  fi
  # A look while the server waits for its handlers: its connections as the module sees them, and
  # where its threads are.
  sleep 15
  if kill -0 $server 2>/dev/null; then
    "$(dirname "$shim")/../tools/tcp2rdma" stat -a > "$T2R_WORK/server-stat" 2>&1
    gdb -p $server -batch -ex "thread apply all bt" > "$T2R_WORK/server-stacks" 2>&1
  fi
  # The server has 30 s for its handlers to end, then says so: a process still there after 60 s hangs.
  i=0; while kill -0 $server 2>/dev/null && [ $i -lt 60 ]; do i=$((i+1)); sleep 1; done
  if kill -0 $server 2>/dev/null; then
    echo "chaos: the server hangs; its threads' stacks in $T2R_WORK/server-stacks"
    gdb -p $server -batch -ex "thread apply all bt" > "$T2R_WORK/server-stacks" 2>&1
    kill -9 $server
    touch "$T2R_WORK/a-done"
    exit 1
  fi
  wait $job; status=$?
  touch "$T2R_WORK/a-done"
  exit $status
fi
sleep 5
run $py client "$T2R_PEER" 5013 "$5" "$6" 1 & first=$!
if [ "$4" -gt 0 ]; then
  run $py client "$T2R_PEER" 5013 16 100 2 &
  # The python process itself (the shell that runs it may stay its parent).
  sleep "$4"; pkill -9 -f "chaos_echo.py client $T2R_PEER 5013 16 100 2" && echo "chaos: killed the second client"
fi
# A first client still running after 360 s hangs: its stacks and connections, and the
# server's (a looks when it sees the file "look"), are taken before it is killed.
i=0; while kill -0 $first 2>/dev/null && [ $i -lt 360 ]; do i=$((i+1)); sleep 1; done
if kill -0 $first 2>/dev/null; then
  echo "chaos: the first client hangs; its threads' stacks in $T2R_WORK/client-stacks"
  client=$(pgrep -f "chaos_echo.py client $T2R_PEER 5013 $5 $6 1")
  "$(dirname "$shim")/../tools/tcp2rdma" stat -a > "$T2R_WORK/client-stat" 2>&1
  gdb -p $client -batch -ex "thread apply all bt" > "$T2R_WORK/client-stacks" 2>&1
  touch "$T2R_WORK/look"; sleep 20
  kill -9 $client
fi
wait $first; status=$?
run $py final "$T2R_PEER" 5013 20 || status=1
touch "$T2R_WORK/stop"
# A failure here would stop the server's guest at once: it first takes its look and ends its server.
i=0; until [ -e "$T2R_WORK/a-done" ] || [ $i -ge 150 ]; do i=$((i+1)); sleep 1; done
exit $status
