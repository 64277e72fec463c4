#!/bin/sh
# peer_killed.sh PEER_BINARY: a client process killed with SIGKILL in the middle of a stream; the
# server, blocked in read, must see a reset (not a clean end of stream) within seconds.
peer=$1
"$peer" server-until-reset 7481 21 &
server=$!
"$peer" client-forever "$T2R_PEER" 7481 21 &
client=$!
sleep 3
kill -9 "$client"
wait "$server"
