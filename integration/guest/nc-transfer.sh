#!/bin/sh
# nc-transfer.sh receive PORT | send PORT MIB: OpenBSD nc moves MIB MiB of random bytes from host B to
# host A over kernel TCP; the receiver compares its checksum with the one the sender left in T2R_WORK,
# and both check that the RDMA device stayed silent (this path must not use RDMA).
set -eu
here=$(dirname "$0")
pkts() { "$here/rdma-counters" | awk '$1=="sent_pkts"{print $2}'; }
before=$(pkts)
case "$1" in
  receive)
    nc -N -l "$2" > /tmp/received
    i=0; until [ -f "$T2R_WORK/sent.sha256" ]; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done
    got=$(sha256sum < /tmp/received | cut -d' ' -f1)
    want=$(cat "$T2R_WORK/sent.sha256")
    echo "received $(wc -c < /tmp/received) bytes, sha256 $got"
    [ "$got" = "$want" ] || { echo "checksum differs from the sender's $want"; exit 1; } ;;
  send)
    head -c "$(( $3 * 1048576 ))" /dev/urandom > /tmp/data
    sha256sum < /tmp/data | cut -d' ' -f1 > "$T2R_WORK/sent.sha256.tmp"
    mv "$T2R_WORK/sent.sha256.tmp" "$T2R_WORK/sent.sha256"
    i=0; until nc -N "$T2R_PEER" "$2" < /tmp/data; do i=$((i+1)); [ $i -lt 50 ] || exit 1; sleep 0.2; done
    echo "sent $(( $3 * 1048576 )) bytes" ;;
esac
after=$(pkts)
[ "$after" = "$before" ] || { echo "RDMA device sent $((after - before)) packets on a TCP-only path"; exit 1; }
