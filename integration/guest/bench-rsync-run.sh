#!/bin/sh
# bench-rsync-run.sh SHIM RULES ROUNDS SIZE a|b: the guests' part of integration/bench-rsync.sh. Guest
# A runs two `rsync --daemon`s as nobody: on 5016 under the module (RULES), on 5098 without it (kernel
# TCP, the reference). Guest B pulls a tree of SIZE bytes from each and pushes one to each, ROUNDS
# times, alternating, and prints one result line per transfer: its time, rxe's packets received and
# sent meanwhile, and (through the module) whether a relay carried it.
set -u
shim=$1 rules=$2 rounds=$3 size=$4 role=$5
here=$(cd "$(dirname "$0")" && pwd)
tests=$here/../../tests/preload/process
log=$T2R_WORK/shim-$T2R_HOST.log
nobody="setpriv --reuid=nobody --regid=nogroup --clear-groups"
touch "$log" && chmod 666 "$log"
if [ "$role" = a ]; then
  python3 "$tests/make_tree.py" /tmp/pull-source 1 "$size" && chmod -R a+rX /tmp/pull-source
  for port in 5016 5098; do
    mkdir -p /tmp/push-$port /tmp/rsyncd-$port && chown nobody:nogroup /tmp/push-$port /tmp/rsyncd-$port
    printf 'pid file = /tmp/rsyncd-%s/pid\nuse chroot = no\n[pull]\n  path = /tmp/pull-source\n[push]\n  path = /tmp/push-%s\n  read only = false\n' \
      "$port" "$port" > /tmp/rsyncd-$port.conf
  done
  env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" \
    $nobody rsync --daemon --no-detach --port=5016 --config=/tmp/rsyncd-5016.conf &
  $nobody rsync --daemon --no-detach --port=5098 --config=/tmp/rsyncd-5098.conf &
  until ss -ltn | grep -q ":5016 " && ss -ltn | grep -q ":5098 "; do sleep 0.1; done
  touch "$T2R_WORK/servers-up"
  until [ -f "$T2R_WORK/clients-done" ]; do sleep 0.2; done
  exit 0
fi
python3 "$tests/make_tree.py" /tmp/push-source 2 "$size"
until [ -f "$T2R_WORK/servers-up" ]; do sleep 0.2; done
counter() { "$here/rdma-counters" | awk -v n="$1" '$1 == n { print $2 }'; }
transfer() {  # PORT WHAT ARGS...
  port=$1 what=$2; shift 2
  rm -rf /tmp/pulled
  relays=$(grep -c "relays the peer's bytes" "$log")
  rcvd=$(counter rcvd_pkts) sent=$(counter sent_pkts) began=$(date +%s%N)
  if [ "$port" = 5016 ]; then
    env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" rsync -a "$@" || echo "failed: rsync $*"
  else
    rsync -a "$@" || echo "failed: rsync $*"
  fi
  ms=$(( ($(date +%s%N) - began) / 1000000 ))
  echo "result round $round $what port $port: $ms ms, rxe received $(( $(counter rcvd_pkts) - rcvd )) and sent" \
    "$(( $(counter sent_pkts) - sent )) packets, $(( $(grep -c "relays the peer's bytes" "$log") - relays )) relays here"
}
for round in $(seq "$rounds"); do
  for port in 5098 5016; do
    transfer $port pull "rsync://$T2R_PEER:$port/pull/" /tmp/pulled/
    transfer $port push /tmp/push-source/ "rsync://$T2R_PEER:$port/push/round-$round/"  # a new tree each time
  done
done
touch "$T2R_WORK/clients-done"
