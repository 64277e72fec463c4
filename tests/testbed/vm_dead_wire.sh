#!/usr/bin/env bash
# vm_dead_wire.sh VM: a pair guest whose command failed asks whether the wire still works
# (integration/testbed/wire-check.sh). Two runs:
#  1. the wire works (A sleeps, B's command fails): the failure is reported as it is, status 1, no
#     second attempt, and the check says the peer answered;
#  2. the peer answers nothing (A takes its link down, so what B sends is lost; no netem, which would
#     say "cut on purpose"): taken for a stalled wire, said, run once more, then status 95.
# TCP2RDMA_VM_WIRE_CHECK_S=5 instead of 15 and one retry (TCP2RDMA_VM_STALL_RETRIES=1) keep it short.
set -uo pipefail
vm=$1
work=$(mktemp -d /var/tmp/tcp2rdma-dead-wire.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "vm_dead_wire: $*" >&2; exit 1; }

# B fails only once A's command runs (A's file in the shared work directory): a guest may boot seconds
# after the other under load, and B's failure before it (a wire with nobody at its end yet, or still
# up) would test something else.
after_a() { echo "i=0; until [ -e \"\$T2R_WORK/$1\" ]; do i=\$((i+1)); [ \$i -lt 600 ] || break; sleep 0.1; done; false"; }
out=$(TCP2RDMA_VM_WIRE_CHECK_S=5 "$vm" pair --timeout 120 --work "$work/alive" \
  'touch "$T2R_WORK/a-runs" && sleep 100 && echo this must never end' "$(after_a a-runs)" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 1 ] || fail "working wire: status $status, wanted 1 (the command's own)"
grep -q 'wire-check: 10.77.0.1 answered after' <<<"$out" || fail "working wire: the check did not find the peer"
[ ! -e "$work/alive/attempt-1" ] || fail "working wire: the test ran twice"
grep -q 'the virtual wire' <<<"$out" && fail "working wire: a stall was said"

out=$(TCP2RDMA_VM_STALL_RETRIES=1 TCP2RDMA_VM_WIRE_CHECK_S=5 "$vm" pair --timeout 120 --work "$work/dead" \
  'ip link set eth0 down && touch "$T2R_WORK/a-cut" && sleep 100 && echo this must never end' \
  "$(after_a a-cut)" 2>&1)
status=$?
echo "$out"
[ "$status" -eq 95 ] || fail "dead wire: status $status, wanted 95"
grep -q 'the virtual wire between the guests stalled' <<<"$out" || fail "dead wire: the first stall was not said"
grep -q "guest b's command failed and then the other guest answered nothing" <<<"$out" ||
  fail "dead wire: the second stall was not said"
[ -e "$work/dead/attempt-1/wire-dead-b" ] || fail "dead wire: the first attempt's check did not find the wire dead"
! grep -q 'this must never end' "$work/dead/output-a.log" 2>/dev/null || fail "dead wire: A's command ran to its end"
echo "vm_dead_wire: a failure on a working wire is reported as it is; on a dead one it is retried, then 95"
