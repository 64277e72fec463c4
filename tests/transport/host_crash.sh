#!/bin/sh
# host_crash.sh PEER_BINARY: run on host B of the pair. Writes to host A's stream_peer, then this
# whole guest powers off at once, as a crashed host would: no disconnect, no FIN, nothing more on the
# wire. A (server-until-reset) must notice through its keepalive and read a reset, never an end.
peer=$1
"$peer" client-forever "$T2R_PEER" 7491 31 2> /tmp/client.err &
# Crash mid-stream, not mid-setup: a loaded host can take seconds to set the connection up.
i=0
until grep -q 'client: connected' /tmp/client.err 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 300 ] || { echo "host B: the client never connected"; cat /tmp/client.err; exit 1; }
  sleep 0.2
done
sleep 3
echo "host B: powering off now, mid-stream"
echo 0 > "$T2R_WORK/exit-$T2R_HOST"   # the harness's record that this side did its part
sync
echo o > /proc/sysrq-trigger
sleep 60
