#!/bin/sh
# fault_agent.sh KIND [SECONDS]: breaks this guest's RDMA path when $T2R_WORK/cut appears (the client
# of a failover test makes it once its connections are up), then makes $T2R_WORK/uncut-$T2R_HOST.
#   wire      every frame is dropped (netem loss 100%) for SECONDS (default 6), longer than RDMA's
#             retries (about 2 s); both guests run it, so the outage is total, both directions
#   kill      as wire, and 2 s into the outage this guest's failover_echo.py server is killed
#   kill-after-record
#             as wire until the server's failover record is queued on each of its connections (guest
#             a's, the server's: ss shows bytes unacknowledged); then the server is killed and guest
#             a's frames flow again, while guest b drops only its own data segments (PSH: its record)
#             for SECONDS (default 10), its acknowledgements going through. So the dead server's
#             record and its kernel's end reach the client before the client's record can reach the
#             server, whose kernel then answers it with a reset: the order a race gave in CI
#             (failover.cpp, confirm()).
set -u
kind=$1 seconds=${2:-}
until [ -f "$T2R_WORK/cut" ]; do sleep 0.05; done
echo "fault-agent: $kind on $T2R_HOST at $(date -u +%T.%3N)"
dev=$T2R_NETDEV
tc qdisc add dev "$dev" root netem loss 100%
kill_server() { pkill -9 -f 'failover_echo.py server' && echo "fault-agent: killed the server"; }
case "$kind" in
  kill)
    sleep 2
    kill_server
    sleep $((${seconds:-6} - 2))
    ;;
  kill-after-record)
    if [ "$T2R_HOST" = a ]; then
      # Every established connection of the server's (port 5040/5041) holds its record unacknowledged.
      for _ in $(seq 400); do
        queued=$(ss -Htn state established '( sport = :5040 or sport = :5041 )' | awk '{ n++; if ($2 > 0) q++ } END { print (n > 0 && q == n) ? "yes" : "no" }')
        [ "$queued" = yes ] && break
        sleep 0.05
      done
      echo "fault-agent: the server's records queued: $queued"
      kill_server
      touch "$T2R_WORK/killed"
      tc qdisc del dev "$dev" root
    else
      until [ -f "$T2R_WORK/killed" ]; do sleep 0.05; done
      tc qdisc del dev "$dev" root
      # Band 3 (netem loss 100%) gets IPv4 TCP segments with PSH set (header flags at byte 33 with a
      # 20-byte IP header); everything else goes out as usual.
      tc qdisc add dev "$dev" root handle 1: prio
      tc qdisc add dev "$dev" parent 1:3 handle 30: netem loss 100%
      tc filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff match u8 0x08 0x08 at 33 flowid 1:3
      echo "fault-agent: only data segments dropped on $T2R_HOST"
      sleep "${seconds:-10}"
    fi
    ;;
  *)
    sleep "${seconds:-6}"
    ;;
esac
tc qdisc del dev "$dev" root 2>/dev/null
echo "fault-agent: the wire is whole again on $T2R_HOST at $(date -u +%T.%3N)"
touch "$T2R_WORK/uncut-$T2R_HOST"
