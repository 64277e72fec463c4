#!/bin/sh
# pin_declined.sh server|client SHIM RULES HOST PORT: both halves of integration.pin_declined.pair. The
# server, OpenBSD nc as nobody with RLIMIT_MEMLOCK 48 KiB, has an RDMA listener but room to pin no
# ring (transport/pin_budget.h); the client, root nc under the module with a before-return rule,
# sends 1 MB. The server declines the RDMA request with its reason (a Decline record,
# docs/protocol.md), so the client's log says why ("the peer declined: it has no room to pin another
# ring", not "no tcp2rdma listener"), and the bytes go over TCP, whole.
set -u
role=$1 shim=$2 rules=$3 host=$4 port=$5
here=$(cd "$(dirname "$0")" && pwd)
if [ "$role" = server ]; then
  sh "$here/as_nobody.sh" 48 env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" nc -N -l "$port" > /tmp/got
  status=$?
  cat /tmp/shim-nobody.log
  got=$(sha256sum < /tmp/got | cut -d' ' -f1)
  echo "server: nc exited $status; received $(wc -c < /tmp/got) bytes, sha256 $got"
  [ $status -eq 0 ] && [ "$got" = "$(cat "$T2R_WORK/sent.sha256")" ] &&
    grep -q 'stays tcp (no room to pin another ring' /tmp/shim-nobody.log
  exit
fi
head -c 1000000 /dev/urandom > /tmp/data
sha256sum < /tmp/data | cut -d' ' -f1 > "$T2R_WORK/sent.sha256"
log=$T2R_WORK/shim-$T2R_HOST.log
i=0
until env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" nc -N "$host" "$port" < /tmp/data; do
  i=$((i + 1)); [ $i -lt 100 ] || { echo "pin_declined: nc never got through"; exit 1; }
  sleep 0.2
done
cat "$log"
grep -q 'stays tcp (the peer declined: it has no room to pin another ring)' "$log"
