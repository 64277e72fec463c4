#!/bin/sh
# rsync_daemon.sh SHIM RULES BG_RULES SPLIT_RULES a|b: integration.rsync_daemon.pair. rsync as
# deployed: `rsync --daemon` in guest A forks a process per connection, which drops to nobody for its
# module; the client in guest B pulls a tree from it and pushes another to it, both ends under the
# module. Each side of a transfer that receives forks once more: its child (the receiver) only reads
# the connection and its parent (the generator) only writes it, for the whole transfer.
#  - 5016, SPLIT_RULES (server-background.yaml: servers upgrade in the background, clients before
#    connect() returns), the daemon run as nobody: the daemon's child takes the upgrade its fork
#    interrupted up, the client's connect() returns on RDMA, and at the receiving side's fork the
#    connection stays on RDMA in the generator, which relays the sender's bytes to the receiver
#    (docs/architecture.md, "Forks"): the bulk crosses rxe both ways (the pull's at the client, the
#    push's at the daemon's child);
#  - 5017, SPLIT_RULES, the daemon run as root as deployed: its child changes credentials for the
#    module, which moves the connection back to TCP (docs/architecture.md, "Credentials") with a
#    marker that says it returns at once; the client's next call waits for the return (before-return
#    rules), so the connection is on RDMA again before the client forks, and the bulk crosses rxe
#    through the relays as on 5016;
#  - 5015, before-return rules at both ends, the daemon run as root: every connection is on RDMA
#    before its first byte, and goes back to TCP when the daemon's parent closes its copy, before the
#    client forks (the child's ask to return comes after that fork, and the client's two processes
#    decline): that bulk stays on TCP, exact;
#  - 5025, background rules: the forks interrupt the upgrades (the client's stays TCP).
# Every tree must arrive identical (SHA-256 of every file), every rsync must succeed, each end must
# log the upgrades of 5015's, 5016's and 5017's connections, the relays of 5016's and 5017's (one of
# each at each end), and no connection may be reset. About 30 s.
set -u
shim=$1 rules=$2 bg_rules=$3 split_rules=$4 role=$5
[ "$role" = a ] && side=server || side=client
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=$T2R_WORK/shim-$T2R_HOST.log
size=4194304
manifest() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
# same_tree DIR SUMS WHAT: DIR's files against the manifest SUMS, said for WHAT; 1 when they differ.
same_tree() {
  if manifest "$1" | cmp -s - "$2"; then echo "rsync-daemon $side: $3 is identical"; return 0; fi
  echo "rsync-daemon $side: $3 DIFFERS"
  return 1
}
daemon() {  # PORT RULES [AS]: run as root, each connection's process changes to nobody for its module;
  # AS=user: the daemon runs as nobody from the start, and changes no credentials.
  ids="uid = nobody
  gid = nogroup"
  as=
  if [ "${3:-}" = user ]; then ids=; as="setpriv --reuid=nobody --regid=nogroup --clear-groups"; fi
  cat > /tmp/rsyncd-$1.conf <<EOC
pid file = /tmp/rsyncd-$1/pid
use chroot = no
[pull]
  path = /tmp/pull-source
  $ids
[push]
  path = /tmp/push-$1
  read only = false
  $ids
EOC
  mkdir -p /tmp/push-$1 /tmp/rsyncd-$1 && chown nobody:nogroup /tmp/push-$1 /tmp/rsyncd-$1
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$2" TCP2RDMA_LOG="$log" \
    $as rsync --daemon --no-detach --port="$1" --config=/tmp/rsyncd-$1.conf &
}
# A connection the module reset (an upgrade that stayed on TCP may name a reset of its RDMA attempt).
resets() { grep -i "reset\|the rdma stream failed" "$log" | grep -vc "stays tcp"; }
if [ "$role" = a ]; then
  touch "$log" && chmod 666 "$log"
  python3 "$here/make_tree.py" /tmp/pull-source 1 $size && chmod -R a+rX /tmp/pull-source
  manifest /tmp/pull-source > "$T2R_WORK/pull-source.sum"
  daemon 5015 "$rules"; servers=$!
  daemon 5025 "$bg_rules"; servers="$servers $!"
  daemon 5016 "$split_rules" user; servers="$servers $!"
  daemon 5017 "$split_rules"; servers="$servers $!"
  until ss -ltn | grep -q ":5015 " && ss -ltn | grep -q ":5025 " && ss -ltn | grep -q ":5016 " &&
    ss -ltn | grep -q ":5017 "; do sleep 0.1; done
  touch "$T2R_WORK/servers-up"
  until [ -f "$T2R_WORK/clients-done" ]; do sleep 0.2; done
  kill $servers
  status=0
  for port in 5015 5025 5016 5017; do
    same_tree /tmp/push-$port "$T2R_WORK/push-source.sum" "the tree pushed to $port" || status=1
  done
  upgraded=$(grep -c "5015 -> .*upgraded to rdma" "$log")
  split=$(grep -c "5016 -> .*upgraded to rdma" "$log")
  relayed=$(grep -c "5016 -> .*relays the peer's bytes to both" "$log")
  # 5017: the daemon's child back on RDMA after its change of credentials, then its push's relay.
  returned=$(grep -c "5017 -> .*back on rdma\|5017 -> .*upgraded to rdma" "$log")
  relayed_root=$(grep -c "5017 -> .*relays the peer's bytes to both" "$log")
  echo "rsync-daemon server: $upgraded connections of 5015 and $split of 5016 upgraded to rdma," \
    "$relayed of 5016 relayed to a receiver; 5017 (root): $returned upgrades and returns, $relayed_root relayed;" \
    "$(resets) resets"
  [ "$upgraded" -ge 2 ] && [ "$split" -ge 2 ] && [ "$relayed" -ge 1 ] && [ "$(resets)" -eq 0 ] || status=1
  [ "$returned" -ge 4 ] && [ "$relayed_root" -ge 1 ] || status=1
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
# The relayed bulk: rxe's packets while 5016's pull and push run (received, then sent, here).
counter() { "$guest/rdma-counters" | awk -v n="$1" '$1 == n { print $2 }'; }
# split_bulk PORT: a pull and a push on PORT under SPLIT_RULES; rxe's packets received in the pull
# and sent in the push, in $pulled and $pushed.
split_bulk() {
  at=$(counter rcvd_pkts)
  run "$split_rules" "rsync://$T2R_PEER:$1/pull/ /tmp/pulled-$1/"
  pulled=$(( $(counter rcvd_pkts) - at ))
  at=$(counter sent_pkts)
  run "$split_rules" "/tmp/push-source/ rsync://$T2R_PEER:$1/push/"
  pushed=$(( $(counter sent_pkts) - at ))
}
split_bulk 5016
pulled_pkts=$pulled pushed_pkts=$pushed
split_bulk 5017
root_pulled_pkts=$pulled root_pushed_pkts=$pushed
before=$("$guest/rdma-counters")
run "$rules" "rsync://$T2R_PEER:5015/pull/ /tmp/pulled-5015/"
run "$rules" "/tmp/push-source/ rsync://$T2R_PEER:5015/push/"
run "$bg_rules" "rsync://$T2R_PEER:5025/pull/ /tmp/pulled-5025/"
run "$bg_rules" "/tmp/push-source/ rsync://$T2R_PEER:5025/push/"
after=$("$guest/rdma-counters")
for port in 5016 5017 5015 5025; do
  same_tree /tmp/pulled-$port "$T2R_WORK/pull-source.sum" "the tree pulled from $port" || status=1
done
received=$(printf '%s\n%s\n' "$before" "$after" | awk '$1 == "rcvd_pkts" { v[n++] = $2 } END { print v[1] - v[0] }')
upgraded=$(grep -c ":5015: .*upgraded to rdma" "$log")
# The path intended for the bulk: back on TCP once the daemon's parent let go of the connection.
moved=$(grep -c ":5015: .*back on tcp" "$log")
split=$(grep -c ":5016: .*upgraded to rdma" "$log")
relayed=$(grep -c ":5016: .*relays the peer's bytes to both" "$log")
returned=$(grep -c ":5017: .*back on rdma" "$log")
relayed_root=$(grep -c ":5017: .*relays the peer's bytes to both" "$log")
echo "rsync-daemon client: $upgraded connections of 5015 upgraded to rdma, $moved back on tcp, $(resets) resets," \
  "rxe received $received packets; 5016: $split upgraded, $relayed relayed to the receiver, rxe received" \
  "$pulled_pkts packets in the pull and sent $pushed_pkts in the push (the tree: $((size / 4096)) of 4 KiB);" \
  "5017 (root): $returned back on rdma, $relayed_root relayed, rxe received $root_pulled_pkts in the pull and" \
  "sent $root_pushed_pkts in the push"
[ "$upgraded" -ge 2 ] && [ "$moved" -ge 2 ] && [ "$(resets)" -eq 0 ] && [ "$received" -gt 0 ] || status=1
# The bulk on RDMA: at least the tree's size in 4 KiB packets (rxe's MTU is at most 4 KiB).
[ "$split" -ge 2 ] && [ "$relayed" -ge 1 ] && [ "$pulled_pkts" -ge $((size / 4096)) ] &&
  [ "$pushed_pkts" -ge $((size / 4096)) ] || status=1
# A root daemon's: each connection back on RDMA after the child's change of credentials, before the
# client's fork (the pull's relay is the client's), and the bulk across rxe both ways.
[ "$returned" -ge 2 ] && [ "$relayed_root" -ge 1 ] && [ "$root_pulled_pkts" -ge $((size / 4096)) ] &&
  [ "$root_pushed_pkts" -ge $((size / 4096)) ] || status=1
touch "$T2R_WORK/clients-done"
grep -v "credentials changed" "$log" | cut -c1-240
sleep 3  # guest a reads the trees and its log
exit $status
