#!/bin/sh
# rsync_daemon.sh SHIM RULES BG_RULES a|b: integration.rsync_daemon.pair. rsync as deployed: `rsync
# --daemon` in guest A forks a process per connection, which drops to nobody for its module; the
# client in guest B pulls a tree from it and pushes another to it, both ends under the module. Each
# side of a transfer that receives forks once more: its child reads the connection and its parent
# writes it, for the whole transfer (the receiving rsync's generator and receiver).
#  - 5015, before-return rules: every connection is on RDMA before its first byte, and goes back to
#    TCP at the forks (the daemon's parent closes its copy; the receiving side's two processes both
#    use it); the pull is paced (--bwlimit) so that the daemon's child, alone with the connection,
#    asks to go back to RDMA mid-transfer, which the client, two processes, declines;
#  - 5025, background rules: the forks interrupt the upgrades.
# Every tree must arrive identical (SHA-256 of every file), every rsync must succeed, each end must
# log the upgrades of 5015's two connections before the forks (and the client their moves back to
# TCP, where the bulk goes), and no connection may be reset.
# The bulk stays on TCP: a stream whose two directions are used by two processes is not built
# (docs/architecture.md, "Back to RDMA", limits). About 25 s.
set -u
shim=$1 rules=$2 bg_rules=$3 role=$4
[ "$role" = a ] && side=server || side=client
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
size=8388608
manifest() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
# same_tree DIR SUMS WHAT: DIR's files against the manifest SUMS, said for WHAT; 1 when they differ.
same_tree() {
  if manifest "$1" | cmp -s - "$2"; then echo "rsync-daemon $side: $3 is identical"; return 0; fi
  echo "rsync-daemon $side: $3 DIFFERS"
  return 1
}
daemon() {  # PORT RULES
  cat > /tmp/rsyncd-$1.conf <<EOC
pid file = /tmp/rsyncd-$1.pid
use chroot = no
[pull]
  path = /tmp/pull-source
  uid = nobody
  gid = nogroup
[push]
  path = /tmp/push-$1
  read only = false
  uid = nobody
  gid = nogroup
EOC
  mkdir -p /tmp/push-$1 && chown nobody:nogroup /tmp/push-$1
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$2" TCP2RDMA_LOG="$log" \
    rsync --daemon --no-detach --port="$1" --config=/tmp/rsyncd-$1.conf &
}
# A connection the module reset (an upgrade that stayed on TCP may name a reset of its RDMA attempt).
resets() { grep -i "reset\|the rdma stream failed" "$log" | grep -vc "stays tcp"; }
if [ "$role" = a ]; then
  touch "$log" && chmod 666 "$log"
  python3 "$here/make_tree.py" /tmp/pull-source 1 $size && chmod -R a+rX /tmp/pull-source
  manifest /tmp/pull-source > "$T2R_WORK/pull-source.sum"
  daemon 5015 "$rules"; servers=$!
  daemon 5025 "$bg_rules"; servers="$servers $!"
  until ss -ltn | grep -q ":5015 " && ss -ltn | grep -q ":5025 "; do sleep 0.1; done
  touch "$T2R_WORK/servers-up"
  until [ -f "$T2R_WORK/clients-done" ]; do sleep 0.2; done
  kill $servers
  status=0
  for port in 5015 5025; do
    same_tree /tmp/push-$port "$T2R_WORK/push-source.sum" "the tree pushed to $port" || status=1
  done
  upgraded=$(grep -c "5015 -> .*upgraded to rdma" "$log")
  echo "rsync-daemon server: $upgraded connections of 5015 upgraded to rdma, $(resets) resets"
  [ "$upgraded" -ge 2 ] && [ "$(resets)" -eq 0 ] || status=1
  grep -v "credentials changed" "$log" | cut -c1-240
  exit $status
fi
touch "$log" && chmod 666 "$log"
python3 "$here/make_tree.py" /tmp/push-source 2 $size
manifest /tmp/push-source > "$T2R_WORK/push-source.sum"
until [ -f "$T2R_WORK/servers-up" ]; do sleep 0.2; done
run() {
  began=$(date +%s%N)
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$1" TCP2RDMA_LOG="$log" rsync -a $2 || { echo "rsync $2 failed"; status=1; }
  echo "rsync-daemon client: rsync -a $2 took $(( ($(date +%s%N) - began) / 1000000 )) ms"
}
status=0
before=$("$guest/rdma-counters")
run "$rules" "--bwlimit=2000 rsync://$T2R_PEER:5015/pull/ /tmp/pulled-5015/"
run "$rules" "/tmp/push-source/ rsync://$T2R_PEER:5015/push/"
run "$bg_rules" "rsync://$T2R_PEER:5025/pull/ /tmp/pulled-5025/"
run "$bg_rules" "/tmp/push-source/ rsync://$T2R_PEER:5025/push/"
after=$("$guest/rdma-counters")
for port in 5015 5025; do
  same_tree /tmp/pulled-$port "$T2R_WORK/pull-source.sum" "the tree pulled from $port" || status=1
done
received=$(printf '%s\n%s\n' "$before" "$after" | awk '$1 == "rcvd_pkts" { v[n++] = $2 } END { print v[1] - v[0] }')
upgraded=$(grep -c ":5015: .*upgraded to rdma" "$log")
# The path intended for the bulk: back on TCP once the daemon's parent let go of the connection.
moved=$(grep -c ":5015: .*back on tcp" "$log")
echo "rsync-daemon client: $upgraded connections of 5015 upgraded to rdma, $moved back on tcp, $(resets) resets," \
  "rxe received $received packets"
[ "$upgraded" -ge 2 ] && [ "$moved" -ge 2 ] && [ "$(resets)" -eq 0 ] && [ "$received" -gt 0 ] || status=1
touch "$T2R_WORK/clients-done"
grep -v "credentials changed" "$log" | cut -c1-240
sleep 3  # guest a reads the trees and its log
exit $status
