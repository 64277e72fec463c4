#!/bin/sh
# app-servers.sh NAME 'CMD' 'READY' [NAME 'CMD' 'READY'...]: the server guest's half of an application
# test. Starts each CMD under the shim (T2R_SHIM, rules in TCP2RDMA_RULES, log T2R_WORK/shim-HOST.log)
# in the background, its output in T2R_WORK/server-NAME.log; once every output matches its READY
# (an extended regular expression) it creates T2R_WORK/servers-ready, which the client guest waits for
# (wait-servers.sh). Then it waits until the client guest's command has ended (its exit file in the
# shared work directory) and fails if any server died before that: a server that crashed or gave up
# must not pass unseen. Each server's output is shown.
set -eu
peer_host=b; [ "$T2R_HOST" = b ] && peer_host=a
entries=""
while [ $# -ge 3 ]; do
  env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$T2R_WORK/shim-$T2R_HOST.log" sh -c "exec $2" \
    > "$T2R_WORK/server-$1.log" 2>&1 &
  printf '%s\n' "$3" > "/tmp/ready-$1"
  entries="$entries $1:$!"; shift 3
done
i=0
for entry in $entries; do
  name=${entry%%:*}
  until grep -E -q -f "/tmp/ready-$name" "$T2R_WORK/server-$name.log"; do
    i=$((i + 1)); [ $i -lt 600 ] || { echo "app-servers: $name never became ready:"; cat "$T2R_WORK/server-$name.log"; exit 1; }
    sleep 0.1
  done
done
touch "$T2R_WORK/servers-ready"
until [ -f "$T2R_WORK/exit-$peer_host" ]; do sleep 0.5; done
status=0
for entry in $entries; do
  name=${entry%%:*} pid=${entry#*:}
  echo "--- server $name:"; cat "$T2R_WORK/server-$name.log"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
  else
    wait "$pid" && rc=0 || rc=$?
    echo "app-servers: server $name ended (status $rc) before the client side was done"; status=1
  fi
done
exit $status
