#!/bin/sh
# fork_return_client.sh SHIM RULES FAILOVER_RULES: guest b's half of integration.fork_return.pair
# (fork_return_server.sh). Each connection echoes parts written some seconds apart, so that it is in
# use after its return is due; the last part's echo must go over RDMA (rxe's sent_pkts while it goes)
# and every byte must come back:
#  1. nc to the accept-then-fork server on 5012;
#  2. nc to the server on 5014 whose child claims the connection before its parent lets go;
#  3. forked_client.py to 5013: it connects on RDMA, forks, and its parent exits: the child learns
#     from the parent's last answer that it holds the connection alone, and returns it to RDMA;
#  4. nc to 5040, with a 6 s outage of the wire in the middle (fault_agent.sh, both guests).
set -u
shim=$1 rules=$2 failover_rules=$3
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
env="LD_PRELOAD=$shim TCP2RDMA_LOG=$log TCP2RDMA_LOG_TIME=1"
counter() { "$guest/rdma-counters" | awk '$1 == "sent_pkts" { print $2 }'; }
head -c 1000000 /dev/urandom > /tmp/p1
head -c 1000000 /dev/urandom > /tmp/p2
head -c 2000000 /dev/urandom > /tmp/p3
cat /tmp/p1 /tmp/p2 /tmp/p3 > /tmp/all
status=0
# Waits (at most 30 s) for a line of this guest's log that matches $1.
logged() {
  for _ in $(seq 300); do grep -q "$1" "$log" && return 0; sleep 0.1; done
}
# Writes the three parts of connection $2 (to port $3): the first at once, the second after $1 (its
# write starts the return once one is due), the third once the log says the connection is back on
# RDMA, with rxe's counter read around it (into /tmp/sent-$2). The connection stays open after it
# until guest a's `tcp2rdma stat` has looked (late-stat-taken; 30 s at most) when that is waited for.
paced() {
  cat /tmp/p1; eval "$1"; cat /tmp/p2
  logged ":$3: .*back on rdma"
  before=$(counter); cat /tmp/p3; touch "$T2R_WORK/$2-last"; sleep 1; echo $(( $(counter) - before )) > "/tmp/sent-$2"
  [ "$2" != late ] || for _ in $(seq 300); do [ -f "$T2R_WORK/late-stat-taken" ] && break; sleep 0.1; done
}
check() {  # check NAME: the echo equal, and the third part on RDMA
  sent=$(cat "/tmp/sent-$1")
  if cmp -s /tmp/all "/tmp/echo-$1"; then echo "fork-return-client: $1: every byte echoed; rxe sent_pkts +$sent during the last part"
  else echo "fork-return-client: $1: the echo differs"; status=1; fi
  [ "$sent" -ge 1000 ] || { echo "fork-return-client: $1: its last part did not go over rdma"; status=1; }
}
sh "$guest/wait-listening.sh" "$T2R_WORK/server1.err" || exit 1
paced "sleep 2.5" handoff 5012 | env $env TCP2RDMA_RULES="$rules" nc -N "$T2R_PEER" 5012 > /tmp/echo-handoff
check handoff
sh "$guest/wait-listening.sh" "$T2R_WORK/server4.err" || exit 1
paced "sleep 1.5" late 5014 | env $env TCP2RDMA_RULES="$rules" nc -N "$T2R_PEER" 5014 > /tmp/echo-late
check late
rm -f /tmp/forked.result
env $env TCP2RDMA_RULES="$rules" python3 "$here/forked_client.py" "$T2R_PEER" 5013 4 /tmp/forked.result || status=1
for _ in $(seq 300); do [ -f /tmp/forked.result ] && break; sleep 0.1; done
cat /tmp/forked.result 2>/dev/null || { echo "fork-return-client: the forked client never finished"; status=1; }
grep -q 'every byte echoed' /tmp/forked.result 2>/dev/null || status=1
[ "$(sed -n 's/.*sent_pkts +\([0-9]*\).*/\1/p' /tmp/forked.result 2>/dev/null)" -ge 1000 ] 2>/dev/null || status=1
sh "$guest/wait-listening.sh" "$T2R_WORK/server3.err" || exit 1
sh "$here/../back_to_tcp/fault_agent.sh" wire &
outage='sleep 2; touch $T2R_WORK/cut; logged ":5040: .*back on tcp (rdma path failed"; sleep 1.2'
paced "$outage" outage 5040 | env $env TCP2RDMA_RULES="$failover_rules" nc -N "$T2R_PEER" 5040 > /tmp/echo-outage
check outage
wait
grep -E 'let go|back on|failed|for good|still on tcp' "$log" | sed 's/^/fork-return-client:   /'
failed_over=$(grep -c 'back on tcp (rdma path failed' "$log")
back=$(grep -c 'back on rdma' "$log")
echo "fork-return-client: $failed_over failed over, $back went back to rdma"
grep -q 'the parent let go: it may go back to rdma here' "$log" || status=1
[ "$failed_over" -eq 1 ] && [ "$back" -eq 4 ] || status=1
[ -z "$(grep -E 'for good|reset' "$log")" ] || status=1
exit $status
