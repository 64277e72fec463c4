#!/bin/sh
# memlock_limit.sh PEER_BINARY: a client whose RLIMIT_MEMLOCK cannot hold its ring gets a clear
# "cannot register memory (RLIMIT_MEMLOCK)" from connect, not a crash or a hang. 64 KiB: above the
# 32 KiB below which the transport does not touch verbs at all, so ibv_reg_mr itself fails here. Root has
# CAP_IPC_LOCK, so the client runs as nobody without capabilities.
peer=$1
"$peer" server 7482 3 100000 0 &
server=$!
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
      sh -c "ulimit -l 64 && exec $peer client $T2R_PEER 7482 3 100000 0" 2>&1)
status=$?
kill "$server" 2>/dev/null
echo "client (RLIMIT_MEMLOCK 64 KiB) exited $status: $out"
[ "$status" -ne 0 ] && echo "$out" | grep -q 'cannot register memory (RLIMIT_MEMLOCK)'
