#!/bin/sh
# crossed-upgrades.sh: the guest's half of integration.crossed_upgrades.loop. Runs crossed_upgrades.py's
# server and client under the shim (rules/crossed.yaml: both ends before-return) and fails unless the
# client's bytes came back exact, the RDMA device carried them, each end logged its three connections
# upgraded and none staying on TCP (a server whose accept() waits for the request of a connection its
# client will ask for only later keeps it on TCP after the upgrade timeout), and the server logged that
# it let the crossed one go on beside it.
set -eu
here=$(dirname "$0")
script="$here/crossed_upgrades.py"
server_log="$T2R_WORK/shim-server.log"
client_log="$T2R_WORK/shim-client.log"
env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$server_log" python3 "$script" server "$T2R_SELF" 5052 > /tmp/crossed-server.txt 2>&1 &
server=$!
until grep -q listening /tmp/crossed-server.txt 2>/dev/null
do sleep 0.1
done
T2R_MIN_PKTS=100 "$here/expect-rdma" env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$client_log" \
  python3 "$script" client "$T2R_SELF" 5052
wait $server
cat /tmp/crossed-server.txt
status=0
for log in "$server_log" "$client_log"
do
  grep -H '5052' "$log" || true
  upgraded=$(grep -c 'upgraded to rdma' "$log" || true)
  stays=$(grep -c 'stays tcp' "$log" || true)
  if [ "$upgraded" -ne 3 ] || [ "$stays" -ne 0 ]
  then
    echo "crossed-upgrades: $log shows $upgraded of 3 connections upgraded, $stays staying on tcp"
    status=1
  fi
done
if ! grep -q 'its client asked for another connection first' "$server_log"
then
  echo "crossed-upgrades: the server's accept() did not let the crossed connection go on beside it"
  status=1
fi
exit $status
