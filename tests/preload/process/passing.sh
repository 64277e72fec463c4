#!/bin/sh
# passing.sh SHIM BEFORE_RULES BACKGROUND_RULES a|b: integration.pass_connection.pair. A server whose
# master accepts and passes each connection to a worker process over a unix socket (SCM_RIGHTS,
# passing_echo.py), on guest a, under rules that upgrade before accept() returns (port 5014) and in
# the background (port 5024); passing_client.py on guest b, under the same rules, 3 connections a port
# that wait for the worker's greeting before they send 1 MB and 3 that send at once. A connection on
# RDMA goes back to TCP before it is passed, and one whose upgrade is still on TCP stays there
# (docs/architecture.md, "A connection passed to another process"): every greeting-first echo exact;
# an eager one exact or reset, never cut short by a clean end (the last of each port is held 0.5 s by
# the master, so that its bytes are on the way: on RDMA and unread, it must be reset). Before, the master's close ended the
# stream: the worker read a clean end at once and the client's bytes were lost.
set -u
shim=$1 before=$2 background=$3 role=$4
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
if [ "$role" = a ]; then
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$before" TCP2RDMA_LOG="$log" python3 "$here/passing_echo.py" 5014 6 \
    > "$T2R_WORK/worker-5014.out" 2> "$T2R_WORK/server-5014.err" &
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$background" TCP2RDMA_LOG="$log" python3 "$here/passing_echo.py" 5024 6 \
    > "$T2R_WORK/worker-5024.out" 2> "$T2R_WORK/server-5024.err" &
  status=0
  wait %1 || status=1
  wait %2 || status=1
  cat "$T2R_WORK/worker-5014.out" "$T2R_WORK/worker-5024.out" "$T2R_WORK/server-5014.err" "$T2R_WORK/server-5024.err"
  grep 'passed\|stays tcp\|reset' "$log" | sed 's/^/pass-connection server:   /'
  moved=$(grep -c 'back on tcp before it is passed to another process' "$log")
  echo "pass-connection server: $moved connections moved back to tcp before they were passed"
  reset=$(grep -c 'reset as it is passed to another process: .* bytes of the peer.s came on rdma' "$log")
  echo "pass-connection server: $reset reset with the peer's bytes unread"
  # The three greeting-first connections on 5014 were on RDMA, with nothing unread when passed; the
  # last on 5014, held 0.5 s by the master, had its eager client's bytes on the stream.
  [ "$moved" -ge 3 ] && [ "$reset" -ge 1 ] || status=1
  exit $status
fi
status=0
for port in 5014 5024; do
  rules=$before; [ $port = 5024 ] && rules=$background
  sh "$guest/wait-listening.sh" "$T2R_WORK/server-$port.err" || exit 1
  for mode in greeting greeting greeting eager eager eager; do
    env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" \
      python3 "$here/passing_client.py" "$T2R_PEER" $port $mode 1048576 || status=1
  done
done
exit $status
