#!/bin/sh
# nc-transfer.sh receive PORT | send PORT MIB
# OpenBSD nc moves MIB MiB of random bytes from the sending guest to the receiving one, with -N
# (half-close after the data). The receiver compares its sha256 with the one the sender left in
# T2R_WORK/sent-PORT.sha256 (a file a port: a guest that sends twice in a row may write the second
# before its peer has done with the first). Both check the path the bytes took against T2R_EXPECT:
#   tcp   the RDMA device sent no packet meanwhile (default)
#   probe the bytes stayed TCP, but a shim asked its peer over rdma_cm (a few connection-manager
#         packets, fewer than 16, and nothing like the payload)
#   rdma  the RDMA device carried at least one packet per 4 KiB of payload (sent by the sender,
#         received by the receiver)
# With T2R_SHIM set to libtcp2rdma.so, nc runs under it (LD_PRELOAD) and logs to T2R_WORK/shim-HOST.log;
# T2R_EXPECT_LOG is then an extended regular expression that some line of that log must match, and
# T2R_FORBID_LOG one that no line may match. The sender retries its connection every T2R_RETRY_SLEEP
# seconds (default 0.2) until the receiver listens. With T2R_SWITCH_AFTER_MIB=N the sender feeds nc the
# first N MiB, waits until its shim logged the connection's switch to RDMA, then feeds the rest: the
# switch lands mid-stream (upgrade: background). T2R_RECEIVE_FLAGS replaces the receiver's -N (-d:
# never read standard input, so the receiver never half-closes before the switch).
set -eu
here=$(dirname "$0")
expect=${T2R_EXPECT:-tcp}
run() {
  if [ -n "${T2R_SHIM:-}" ]; then
    env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$T2R_WORK/shim-$T2R_HOST.log" "$@"
  else
    "$@"
  fi
}
pkts() { "$here/rdma-counters" | awk -v c="${1:-sent_pkts}" '$1==c{print $2}'; }
before=$(pkts); before_rcvd=$(pkts rcvd_pkts)
case "$1" in
  receive)
    run nc ${T2R_RECEIVE_FLAGS:--N} -l "$2" > /tmp/received
    sums="$T2R_WORK/sent-$2.sha256"
    i=0; until [ -f "$sums" ]; do i=$((i+1)); [ $i -lt 100 ] || { echo "no $sums from the sender"; exit 1; }; sleep 0.1; done
    got=$(sha256sum < /tmp/received | cut -d' ' -f1)
    want=$(cat "$sums")
    echo "received $(wc -c < /tmp/received) bytes, sha256 $got"
    [ "$got" = "$want" ] || { echo "checksum differs from the sender's $want"; exit 1; }
    bytes=$(wc -c < /tmp/received) ;;
  send)
    bytes=$(( $3 * 1048576 ))
    head -c "$bytes" /dev/urandom > /tmp/data
    sha256sum < /tmp/data | cut -d' ' -f1 > "$T2R_WORK/sent-$2.sha256.tmp"
    mv "$T2R_WORK/sent-$2.sha256.tmp" "$T2R_WORK/sent-$2.sha256"
    pause=${T2R_RETRY_SLEEP:-0.2}; tries=$(awk -v p="$pause" 'BEGIN { print int(10 / p) }')  # about 10 s
    feed() {
      if [ -z "${T2R_SWITCH_AFTER_MIB:-}" ]; then cat /tmp/data; return; fi
      head -c $((T2R_SWITCH_AFTER_MIB * 1048576)) /tmp/data
      w=0; until grep -q "client .*:$1: .*upgraded to rdma" "$T2R_WORK/shim-$T2R_HOST.log" 2>/dev/null; do
        w=$((w+1)); [ $w -lt 300 ] || break; sleep 0.1
      done
      tail -c +$((T2R_SWITCH_AFTER_MIB * 1048576 + 1)) /tmp/data
    }
    i=0; until feed "$2" | run nc -N "$T2R_PEER" "$2"; do i=$((i+1)); [ $i -lt "$tries" ] || exit 1; sleep "$pause"; done
    echo "sent $bytes bytes" ;;
  *) echo "usage: nc-transfer.sh receive PORT | send PORT MIB" >&2; exit 2 ;;
esac
sent=$(( $(pkts) - before )); rcvd=$(( $(pkts rcvd_pkts) - before_rcvd ))
payload=$sent; [ "$1" = receive ] && payload=$rcvd
case "$expect" in
  tcp) [ "$sent" -eq 0 ] || { echo "path: RDMA device sent $sent packets on a path that must stay TCP"; exit 1; } ;;
  probe) [ "$sent" -lt 16 ] || { echo "path: RDMA device sent $sent packets on a path that must stay TCP"; exit 1; } ;;
  rdma) [ "$payload" -ge $((bytes / 4096)) ] || { echo "path: only $payload RDMA packets for $bytes bytes"; exit 1; } ;;
esac
echo "path: $expect as expected (RDMA packets sent $sent, received $rcvd)"
if [ -n "${T2R_SHIM:-}" ]; then
  log="$T2R_WORK/shim-$T2R_HOST.log"
  grep -q ': loaded$' "$log" || { echo "the shim was not loaded"; exit 1; }
  if [ -n "${T2R_EXPECT_LOG:-}" ]; then
    grep -E -q "$T2R_EXPECT_LOG" "$log" || { echo "no log line matches '$T2R_EXPECT_LOG':"; cat "$log"; exit 1; }
  fi
  if [ -n "${T2R_FORBID_LOG:-}" ] && grep -E -q "$T2R_FORBID_LOG" "$log"; then
    echo "a log line matches '$T2R_FORBID_LOG':"; cat "$log"; exit 1
  fi
fi
