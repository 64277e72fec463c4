#!/usr/bin/env bash
# vm_start_limit.sh VM: a guest that has not started its command within the start limit is stopped,
# reported as a testbed failure and booted once more; a second late start ends the run with status 96
# (integration/vm, docs/testbed.md). A limit of 1 s is shorter than any boot, so both attempts are late.
set -uo pipefail
vm=$1
work=$(mktemp -d /var/tmp/tcp2rdma-start-limit.XXXXXX)
trap 'rm -rf "$work"' EXIT
out=$(TCP2RDMA_VM_START_LIMIT=1 "$vm" loop --timeout 60 --work "$work" 'echo this must never run' 2>&1)
status=$?
echo "$out"
fail() { echo "vm_start_limit: $*" >&2; exit 1; }
[ "$status" -eq 96 ] || fail "status $status, wanted 96"
[ "$(grep -c 'had not started its command after 1s' <<<"$out")" -eq 2 ] || fail "wanted the late start reported twice"
grep -q 'the guest boots once more' <<<"$out" || fail "no second boot announced"
[ -d "$work/attempt-1" ] || fail "the first attempt's files were not kept in attempt-1/"
! grep -q 'this must never run' "$work/output-a.log" 2>/dev/null || fail "the command ran"
echo "vm_start_limit: both late starts stopped and reported, status 96"
