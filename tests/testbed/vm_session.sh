#!/usr/bin/env bash
# vm_session.sh VM: tests run one after the other in a session of pair guests (integration/vm
# --session, docs/testbed.md "Sessions") each find the guests as a fresh boot leaves them:
#  1. a job leaves a daemon in a session of its own and a file in /tmp; the next job, in the same
#     session, finds neither;
#  2. a failing guest stops the other (98) and is reported as it is; the session ends after it;
#  3. the next test boots a new session; a job that deletes rxe0 ends it, and the one after finds
#     rxe0 again on fresh guests;
#  4. a job past its timeout is stopped (124) and ends its session;
#  5. stop-sessions leaves no guest running.
set -uo pipefail
vm=$1
root=$(mktemp -d /var/tmp/tcp2rdma-session.XXXXXX)   # not /tmp: a session's work root must be shared
trap '"$vm" stop-sessions "$root"; rm -rf "$root"' EXIT
fail() { echo "vm_session: $*" >&2; exit 1; }
export TCP2RDMA_VM_SESSIONS=1
run() { # NAME TIMEOUT A B: sets out and status
  out=$("$vm" pair --session --timeout "$2" --work "$root/$1" "$3" "$4" 2>&1); status=$?
  echo "$out" | sed "s/^/[$1] /"
}

run leave 60 'setsid sleep 1001 < /dev/null > /dev/null 2>&1 & echo left > /tmp/left' 'true'
[ "$status" -eq 0 ] || fail "leave: status $status"
grep -q 'ran as job 1 of session' <<<"$out" || fail "leave: not the session's first job"

run clean 60 'if pgrep -f "sleep 1001"; then echo "a process of the last job is alive"; exit 1; fi &&
  if [ -e /tmp/left ]; then echo "/tmp kept the last job file"; exit 1; fi' 'true'
[ "$status" -eq 0 ] || fail "clean: status $status: the job found what the last one left"
grep -q 'ran as job 2 of session' <<<"$out" || fail "clean: not the session's second job"

run failing 60 'sleep 100 && echo this must never end' 'sleep 1 && false'
[ "$status" -eq 1 ] || fail "failing: status $status, wanted 1 (B's own)"
grep -q "guest a was stopped because the other guest failed" <<<"$out" || fail "failing: A was not stopped"
grep -q 'this must never end' <<<"$out" && fail "failing: A's command ran to its end"
grep -q 'the session ends after this failure' <<<"$out" || fail "failing: the session went on"

run rxe-gone 60 'rdma link delete rxe0' 'true'
[ "$status" -eq 0 ] || fail "rxe-gone: status $status"
grep -q 'session .* booted' <<<"$out" || fail "rxe-gone: no new session after the failure"
grep -q 'the session ends after this test: .*rxe0' <<<"$out" || fail "rxe-gone: the session went on without rxe0"

run rxe-back 60 'rdma link show | grep -q rxe0' 'true'
[ "$status" -eq 0 ] || fail "rxe-back: status $status: rxe0 missing"
grep -q 'ran as job 1 of session' <<<"$out" || fail "rxe-back: not on fresh guests"

run late 15 'sleep 100' 'true'
[ "$status" -eq 124 ] || fail "late: status $status, wanted 124"
grep -q 'the session ends after this failure' <<<"$out" || fail "late: the session went on"

"$vm" stop-sessions "$root"
! pgrep -f "t2r.session=$root/" > /dev/null || fail "guests still run after stop-sessions"
echo "vm_session: jobs found fresh guests; failures, a changed set-up and a timeout ended their sessions"
