#!/bin/sh
# memlock_limit.sh PEER_BINARY: a client whose RLIMIT_MEMLOCK is small (transport/pin_budget.h).
#  - 48 KiB: above the 32 KiB below which the transport does not touch verbs at all, below the
#    smallest stream (a 16 KiB ring, a 16 KiB bounce buffer for the server's, the mailbox page and the
#    outgoing mailbox slots, 320 of 96 bytes: 68 KiB): connect says "no room to pin another ring"
#    before registering anything, no crash, no hang.
#  - 84 KiB (a sixteenth is kept free: 78 KiB): the client asks for a 64 KiB ring, gets the smallest
#    instead, asks the server to keep its own ring to that size, and its 100000 bytes arrive checked.
# Root has CAP_IPC_LOCK, so the client runs as nobody without capabilities.
peer=$1
"$peer" server 7482 3 100000 0 > /tmp/memlock-server.out 2>&1 &
server=$!
client() {
  setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
    sh -c "ulimit -l $1 && exec $peer client $T2R_PEER 7482 3 100000 0" 2>&1
}
out=$(client 48)
status=$?
echo "client (RLIMIT_MEMLOCK 48 KiB) exited $status: $out"
if [ "$status" -eq 0 ] || ! echo "$out" | grep -q 'no room to pin another ring'; then
  kill "$server" 2>/dev/null
  exit 1
fi
out=$(client 84)
status=$?
echo "client (RLIMIT_MEMLOCK 84 KiB) exited $status: $out"
wait "$server"
server_status=$?
cat /tmp/memlock-server.out
[ "$status" -eq 0 ] && [ "$server_status" -eq 0 ]
