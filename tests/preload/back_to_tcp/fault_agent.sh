#!/bin/sh
# fault_agent.sh KIND [SECONDS]: breaks this guest's RDMA path when $T2R_WORK/cut appears (the client
# of a failover test makes it once its connections are up), then makes $T2R_WORK/uncut-$T2R_HOST.
#   wire      every frame is dropped (netem loss 100%) for SECONDS (default 6), longer than RDMA's
#             retries (about 2 s); both guests run it, so the outage is total, both directions
#   kill      as wire, and 2 s into the outage this guest's failover_echo.py server is killed
set -u
kind=$1 seconds=${2:-6}
until [ -f "$T2R_WORK/cut" ]; do sleep 0.05; done
echo "fault-agent: $kind on $T2R_HOST"
tc qdisc add dev "$T2R_NETDEV" root netem loss 100%
if [ "$kind" = kill ]; then
  sleep 2
  pkill -9 -f 'failover_echo.py server' && echo "fault-agent: killed the server"
  sleep $((seconds - 2))
else
  sleep "$seconds"
fi
tc qdisc del dev "$T2R_NETDEV" root
touch "$T2R_WORK/uncut-$T2R_HOST"
