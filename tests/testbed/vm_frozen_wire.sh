#!/usr/bin/env bash
# vm_frozen_wire.sh VM: a pair guest whose eth0 sends nothing while frames keep arriving (here: netem
# drops everything guest A sends, while B sends it datagrams) is taken for a stalled virtual wire: both guests
# are stopped, the stall is said, the test runs once more, and a stall in the last attempt ends the run
# with status 95 (integration/vm, docs/testbed.md). TCP2RDMA_VM_FROZEN_S=10 instead of 60 and one retry
# instead of two (TCP2RDMA_VM_STALL_RETRIES=1) keep it short.
set -uo pipefail
vm=$1
work=$(mktemp -d /var/tmp/tcp2rdma-frozen-wire.XXXXXX)
trap 'rm -rf "$work"' EXIT
# B sends A a datagram every 0.2 s for 100 s (A's address resolved by hand: A's ARP replies are dropped).
sender='import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(500):
    s.sendto(b"x", ("10.77.0.1", 9))
    time.sleep(0.2)'
out=$(TCP2RDMA_VM_STALL_RETRIES=1 TCP2RDMA_VM_FROZEN_S=10 "$vm" pair --timeout 110 --work "$work" \
  'tc qdisc add dev eth0 root netem loss 100% && sleep 100 && echo this must never end' \
  "ip neigh replace 10.77.0.1 lladdr 52:54:00:77:00:01 dev eth0 && python3 -c '$sender' && echo this must never end" 2>&1)
status=$?
echo "$out"
fail() { echo "vm_frozen_wire: $*" >&2; exit 1; }
[ "$status" -eq 95 ] || fail "status $status, wanted 95"
grep -q 'the virtual wire between the guests stalled' <<<"$out" || fail "the first stall was not said"
grep -q "guest a's eth0 sent nothing for 10s while frames kept arriving" <<<"$out" || fail "the second stall was not said"
[ -e "$work/attempt-1/wire-frozen-a" ] || fail "the first attempt did not find guest a frozen"
! grep -q 'this must never end' "$work/output-a.log" "$work/output-b.log" 2>/dev/null || fail "a command ran to its end"
echo "vm_frozen_wire: both stalls found, stopped and reported, status 95"
