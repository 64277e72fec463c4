#!/bin/sh
# pin_declined.sh server|client SHIM RULES HOST PORT: both halves of integration.pin_declined.pair, two
# rounds, on PORT and PORT+1. The server is OpenBSD nc as nobody; the client root nc under the module
# with a before-return rule, sending 1 MB each round; the bytes go over TCP, whole, and both logs say
# why:
#   1. RLIMIT_MEMLOCK 48 KiB: the server has an RDMA listener but room to pin no ring
#      (transport/pin_budget.h). It declines the request with its reason (a Decline record,
#      docs/protocol.md): the client's log reads "the peer declined: it has no room to pin another
#      ring", not "no tcp2rdma listener".
#   2. RLIMIT_MEMLOCK 16 KiB: the server may register no memory at all, so it makes no RDMA listener
#      (libibverbs would warn on its stderr: transport/status.h). The client can only hear "no
#      listener" and says the peer's log has the reason; the server's log gives it: "no RDMA listener
#      on this port: cannot register memory (RLIMIT_MEMLOCK)".
set -u
role=$1 shim=$2 rules=$3 host=$4 port=$5
here=$(cd "$(dirname "$0")" && pwd)

# serve ROUND LIMIT_KIB PORT EXPECTED_LOG_WORDS
serve() {
  rm -f /tmp/shim-nobody.log
  sh "$here/as_nobody.sh" "$2" env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" nc -N -l "$3" > /tmp/got
  status=$?
  cat /tmp/shim-nobody.log
  got=$(sha256sum < /tmp/got | cut -d' ' -f1)
  echo "server, round $1 (memlock $2 KiB): nc exited $status; received $(wc -c < /tmp/got) bytes, sha256 $got"
  [ $status -eq 0 ] && [ "$got" = "$(cat "$T2R_WORK/sent.sha256")" ] || exit 1
  grep -q "$4" /tmp/shim-nobody.log || { echo "server: no log line with '$4'"; exit 1; }
}

# send ROUND PORT EXPECTED_LOG_WORDS
send() {
  log=$T2R_WORK/shim-$T2R_HOST-$1.log
  i=0
  until env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" nc -N "$host" "$2" < /tmp/data; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "pin_declined: nc never got through in round $1"; exit 1; }
    sleep 0.2
  done
  cat "$log"
  grep -q "$3" "$log" || { echo "client, round $1: no log line with '$3'"; exit 1; }
}

if [ "$role" = server ]; then
  serve 1 48 "$port" 'stays tcp (no room to pin another ring'
  serve 2 16 $((port + 1)) 'stays tcp (no RDMA listener on this port: cannot register memory (RLIMIT_MEMLOCK))'
  echo "server: both rounds whole, each log says why"
  exit 0
fi
head -c 1000000 /dev/urandom > /tmp/data
sha256sum < /tmp/data | cut -d' ' -f1 > "$T2R_WORK/sent.sha256"
send 1 "$port" 'stays tcp (the peer declined: it has no room to pin another ring)'
send 2 $((port + 1)) "stays tcp (the peer has no tcp2rdma listener on that port (rejected; its log says why))"
echo "client: both rounds sent"
