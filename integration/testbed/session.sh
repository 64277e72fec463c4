# Sourced by integration/vm: the host's side of a session (vm loop|pair --session, with
# TCP2RDMA_VM_SESSIONS=1): guests booted once and kept to run test after test, each on a guest left as
# a fresh boot leaves it (testbed/session-runner.sh, the guests' side). A boot under TCG costs 6 to
# 10 s; a job in a running session costs about 2 s (the device's quiet second, the clean-up).
#
# A session serves the tests whose work directories share a parent and whose guests would be booted
# alike (topology, memory, shares, accelerator): its directory is that parent's .vm-session-MODE-KEY,
# which the guests mount read-write (so every test's work directory is theirs too). One test at a time
# uses a session (a lock; a test that finds it taken uses a second or a third alike, DIR-2, DIR-3).
# Anything that makes a session doubtful -- a guest that does not take the job, dies, times out or
# whose wire stalls -- stops it, and the test runs once more on fresh guests of its own, saying so;
# the next test boots a new one.
# Sessions power off after TCP2RDMA_VM_SESSION_IDLE seconds without a job (600), or when
# `vm stop-sessions DIR` asks.

session_hosts() { [ "$mode" = pair ] && echo "a b" || echo a; }
# session_plan: sets sroot (the mounted parent) and sdir (the session's directory) for this test.
session_plan() {
  local key
  sroot=$(dirname "$work")
  plan_visibility "$sroot" 0
  key="$mode ${mem:-default} $accel ${shares[*]+"${shares[*]}"} ${covers[*]+"${covers[*]}"} $kdir"
  sdir=$sroot/.vm-session-$mode-$(printf '%s' "$key" | md5sum | cut -c1-10)
}
session_alive() {
  local h
  [ -d "$sdir" ] || return 1
  for h in $(session_hosts); do
    [ -e "$sdir/ready-$h" ] || return 1
    for f in qemu-$h.status done-$h dirty-$h closing-$h; do [ ! -e "$sdir/$f" ] || return 1; done
  done
  [ ! -e "$sdir/stop" ]
}
session_stop() { # DIR: asks its guests to power off, then makes sure
  local dir=$1 i=0
  [ -d "$dir" ] || return 0
  touch "$dir/stop"
  while pgrep -f "t2r.session=$dir( |$)" > /dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
  pkill -f "t2r.session=$dir( |$)" 2>/dev/null || true
  rm -f "$(cat "$dir/wire" 2>/dev/null || echo /nonexistent)"
}
# session_boot: boots the session's guests, detached from this test (they outlive it), and waits until
# their runners are ready. False when they are not within the start limit.
session_boot() {
  local h self peer netdev sock="" began=$SECONDS
  session_stop "$sdir"; rm -rf "$sdir"; mkdir -p "$sdir"
  for h in $(session_hosts); do
    self=10.77.0.1; peer=10.77.0.1; netdev=dummy0
    if [ "$mode" = pair ]; then
      netdev=eth0; [ $h = a ] && peer=10.77.0.2 || self=10.77.0.2
    fi
    guest_prelude "$h" "$self" "$peer" "$netdev" "$sdir" \
      "T2R_SESSION=$sdir T2R_SESSION_IDLE=${TCP2RDMA_VM_SESSION_IDLE:-600}" > "$sdir/run-$h.sh"
    printf 'exec /bin/bash %s/testbed/session-runner.sh\n' "$here" >> "$sdir/run-$h.sh"
  done
  local life=${TCP2RDMA_VM_SESSION_LIFE:-10800}
  boot_one() { # HOST SMP MEM EXTRA...
    ([ -z "${lock:-}" ] || exec {lock}>&-   # the guests must not hold the session's lock
     guest_work=$sroot guest_args="t2r.run=$sdir/run-$1.sh t2r.session=$sdir" timeout_s=$life qemu "$@" \
       < /dev/null 2>&1 | clean > "$sdir/console-$1.log"
     echo "${PIPESTATUS[0]}" > "$sdir/qemu-$1.status") > /dev/null 2>&1 &
  }
  if [ "$mode" = loop ]; then
    boot_one a 2 "${mem:-2048}" -nic none
  else
    sock=$(mktemp -u /tmp/tcp2rdma-wire.XXXXXX); echo "$sock" > "$sdir/wire"
    boot_one a 1 "${mem:-1024}" -netdev stream,id=n0,server=on,addr.type=unix,addr.path="$sock" \
      -device virtio-net-pci,netdev=n0,mac="$(mac_of 10.77.0.1)"
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
    boot_one b 1 "${mem:-1024}" -netdev stream,id=n0,server=off,addr.type=unix,addr.path="$sock" \
      -device virtio-net-pci,netdev=n0,mac="$(mac_of 10.77.0.2)"
  fi
  while [ $((SECONDS - began)) -lt "$start_limit" ]; do
    session_alive && { echo "vm: session $sdir booted in $((SECONDS - began))s" >&2; return 0; }
    for h in $(session_hosts); do
      [ ! -e "$sdir/qemu-$h.status" ] && [ ! -e "$sdir/dirty-$h" ] || break 2
    done
    sleep 0.2
  done
  echo "vm: the session's guests did not get ready (the end of their consoles follows)" >&2
  for h in $(session_hosts); do tail -n 20 "$sdir/console-$h.log" 2>/dev/null | sed "s/^/vm:   [$h] /" >&2; done
  session_stop "$sdir"
  return 1
}
# session_job: runs this test's job-HOST.sh in the session; sets sa/sb (pair) or status (loop) as a
# run of fresh guests would, and copies each guest's console from the job's start to console-HOST.log.
# False when the session could not run it (the test must run on fresh guests).
session_job() {
  local n h began=$SECONDS looked=$SECONDS failed_at="" aborted_at="" broken=""
  declare -A offset
  n=$(( $(cat "$sdir/jobs" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$sdir/jobs"
  for h in $(session_hosts); do offset[$h]=$(stat -c %s "$sdir/console-$h.log" 2>/dev/null || echo 0); done
  printf '%s\n' "$work" > "$sdir/job-$n.tmp"; mv "$sdir/job-$n.tmp" "$sdir/job-$n"
  abort() { # STATUS: the runners kill the job and report STATUS
    [ -n "$aborted_at" ] || { echo "$1" > "$work/abort.tmp"; mv "$work/abort.tmp" "$work/abort"; aborted_at=$SECONDS; }
  }
  while :; do
    local all_done=1
    for h in $(session_hosts); do [ -f "$work/exit-$h" ] || all_done=0; done
    [ $all_done = 0 ] || break
    for h in $(session_hosts); do
      if [ ! -f "$work/exit-$h" ] && { [ -e "$sdir/qemu-$h.status" ] || [ -e "$sdir/done-$h" ]; }; then
        broken="guest $h stopped during the job"; break 2
      fi
      if [ $((SECONDS - began)) -ge 30 ] && [ ! -e "$work/output-$h.log" ]; then
        broken="guest $h did not take the job within 30 s"; break 2
      fi
    done
    if [ -n "$aborted_at" ] && [ $((SECONDS - aborted_at)) -ge 30 ]; then
      broken="the job was stopped and a guest did not say so within 30 s"; break
    fi
    if [ "$mode" = pair ] && [ $((SECONDS - looked)) -ge 5 ]; then
      looked=$SECONDS
      for h in a b; do
        if tx_frozen $h; then touch "$work/wire-frozen-$h"; abort 95; fi
      done
    fi
    # When one guest's command fails, the other usually waits on it forever: stop it after 5 s.
    for h in $(session_hosts); do
      if [ -z "$failed_at" ] && [ -f "$work/exit-$h" ] && [ "$(cat "$work/exit-$h")" != 0 ]; then
        failed_at=$SECONDS; failed_host=$h
      fi
    done
    if [ -n "$failed_at" ] && [ -z "$aborted_at" ] && [ $((SECONDS - failed_at)) -ge 5 ]; then
      touch "$work/stopped-after-$failed_host"; abort 98
    fi
    [ $((SECONDS - began)) -lt "$timeout_s" ] || abort 124
    sleep 0.2
  done
  for h in $(session_hosts); do
    tail -c +$(( ${offset[$h]} + 1 )) "$sdir/console-$h.log" > "$work/console-$h.log" 2>/dev/null || true
    [ ! -e "$sdir/dirty-$h" ] || echo "vm: the session ends after this test: $(cat "$sdir/dirty-$h")" >&2
  done
  if [ -n "$broken" ]; then
    echo "vm: the session could not run this test: $broken" >&2
    session_stop "$sdir"
    return 1
  fi
  if [ "$mode" = pair ]; then
    sa=$(guest_status a 0); sb=$(guest_status b 0)
  else
    status=$(guest_status a 0)
  fi
  echo "vm: ran as job $n of session $sdir" >&2
  # A failure may have left what no clean-up sees (and a timeout or a stalled wire leaves the guests
  # in doubt): the next test boots fresh guests.
  if [ "${sa:-0}${sb:-0}${status:-0}" != 000 ]; then
    echo "vm: the session ends after this failure" >&2
    session_stop "$sdir"
  fi
  return 0
}
# session_run: the test in a session, booted first if none is alive. Tests that run side by side
# (test-all lets two pair tests run at once) take the first free slot: the session's directory, then
# DIR-2, DIR-3. False when it could not run there.
session_run() {
  local lock slot base
  session_plan
  base=$sdir
  for slot in 1 2 3; do
    sdir=$base; [ "$slot" = 1 ] || sdir=$base-$slot
    exec {lock}> "$sdir.lock"
    if flock -n "$lock"; then
      if ! session_alive; then
        session_boot || return 1
      fi
      session_job
      return
    fi
    exec {lock}>&-
  done
  echo "vm: every session of $base is in use; booting guests of this test's own" >&2
  return 1
}
# vm stop-sessions DIR: stops every session whose work directories lie in DIR.
stop_sessions() {
  local dir root
  root=$(cd "$1" 2>/dev/null && pwd) || return 0
  for dir in "$root"/.vm-session-*; do
    [ -d "$dir" ] || continue
    session_stop "$dir"
  done
}
