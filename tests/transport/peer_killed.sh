#!/bin/sh
# peer_killed.sh PEER_BINARY: a client process killed with SIGKILL in the middle of a stream; the
# server, blocked in read, must see a reset (not a clean end of stream) within seconds.
peer=$1
"$peer" server-until-reset 7481 21 &
server=$!
"$peer" client-forever "$T2R_PEER" 7481 21 2> /tmp/client.err &
client=$!
# Killed mid-stream, not mid-setup: a loaded host can take seconds to set the connection up.
i=0
until grep -q 'client: connected' /tmp/client.err 2>/dev/null || [ $i -ge 300 ]; do i=$((i + 1)); sleep 0.2; done
sleep 2
kill -9 "$client"
wait "$server"
