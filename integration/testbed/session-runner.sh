#!/bin/bash
# Run by a session guest's run script after guest-setup.sh (integration/vm --session): instead of
# one command, this guest runs the tests' commands one after the other, each as if on a fresh boot.
# The host publishes job N as the file job-N in the session directory ($T2R_SESSION), holding the
# test's work directory; the test's command for this guest is job-HOST.sh in that directory. Each job:
#   - runs in a cgroup of its own, whose every process is killed when the command ends (servers it left
#     in the background, daemons), or at once when the host writes the file `abort` in the work
#     directory (its content is the status to report: 98, the other guest failed; 124, timed out);
#   - writes output-HOST.log and exit-HOST in its work directory, as a guest of its own would, and
#     reads the console as a guest of its own does (a program that reads its standard input, such as
#     nc, waits there instead of meeting an end of file);
#   - leaves the guest as it found it: after the kill the RDMA device must go quiet (no packet sent or
#     received for a second: a test that expects no RDMA traffic must not count the last one's), /tmp,
#     /run and /dev/shm are emptied, and the guest's network and RDMA set-up (addresses, links,
#     qdiscs, neighbours, RDMA links, modules, mounts) must equal what it was after the set-up. A job
#     that changed it (a test that deletes rxe0 or cuts the wire) ends the session: the guest says why
#     in dirty-HOST and powers off, and the next test boots fresh guests.
# With no job for T2R_SESSION_IDLE seconds the guest powers off. Bash, not sh: its waits are read -t on
# a FIFO nobody writes, not a sleep process (under TCG every process a waiting guest starts costs a
# noticeable share of the host's CPU, which the test running in another guest needs).
session=$T2R_SESSION
state_dir=/run/t2r-session
mkdir -p "$state_dir"
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
[ -e /sys/fs/cgroup/cgroup.procs ] || { echo "testbed: no cgroup2 for the session's jobs" >&2; exit 97; }
mkfifo "$state_dir/never"
exec 7<> "$state_dir/never"
pause() { read -r -t "$1" -u 7 _ || true; }   # sleeps $1 seconds without a process
exec 8<&0   # the console, the jobs' standard input (a background job's would be /dev/null)

# What a job must leave as it was: the guest's network and RDMA set-up. Builtins but for ip and tc:
# every process a guest starts costs tens of milliseconds of the host's CPU under TCG.
guest_state() {
  local dev flags mtu port state name fam addr mnt fs line
  for dev in /sys/class/net/*; do
    read -r flags < "$dev/flags"; read -r mtu < "$dev/mtu"; echo "link ${dev##*/} $flags $mtu"
  done
  while read -r _ name fam addr _; do echo "addr $name $fam $addr"; done <<< "$(ip -o addr show)"
  ip neigh show nud permanent
  tc qdisc show dev "$T2R_NETDEV"
  for port in /sys/class/infiniband/*/ports/*; do
    [ -e "$port/state" ] || continue
    read -r state < "$port/state"; echo "rdma $port $state"
  done
  while read -r name _; do echo "module $name"; done < /proc/modules
  while read -r _ mnt fs _; do echo "mount $mnt $fs"; done < /proc/mounts
}
guest_state > "$state_dir/state.0"

rxe_packets() { # sets packets to the device's sent and received counts
  local counters=/sys/class/infiniband/$T2R_RDMA_DEV/ports/1/hw_counters sent="" rcvd=""
  read -r sent 2>/dev/null < "$counters/sent_pkts"; read -r rcvd 2>/dev/null < "$counters/rcvd_pkts"
  packets="$sent $rcvd"
}
# Waits until the RDMA device has sent and received nothing for a second (at most 30 s): the
# connection manager's last disconnect requests and replies of a killed job's connections.
rxe_quiet() {
  local last i=0
  rxe_packets; last=$packets
  while [ $i -lt 30 ]; do
    pause 1; rxe_packets
    [ "$packets" = "$last" ] && return 0
    last=$packets; i=$((i + 1))
  done
  return 1
}
# Never a mount point or what holds one: the host's directories the guest must see (a checkout under
# /tmp, say) are mounted there.
holds_mount() {
  local mnt
  while read -r _ mnt _; do
    [ "$mnt" != "$1" ] && [ "${mnt#"$1"/}" = "$mnt" ] || return 0
  done < /proc/mounts
  return 1
}
empty_scratch() {
  local entry
  for entry in /tmp/* /tmp/.[!.]* /tmp/..?* /dev/shm/* /dev/shm/.[!.]* /run/* /run/.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    [ "$entry" != "$state_dir" ] && [ "$entry" != /run/t2r-bin ] || continue
    holds_mount "$entry" || rm -rf --one-file-system "$entry"
  done
}
kill_job() { # CGROUP: kills every process in it and waits until they are gone
  echo 1 > "$1/cgroup.kill" 2>/dev/null
  local i=0
  while [ -s "$1/cgroup.procs" ] && [ $i -lt 100 ]; do pause 0.1; i=$((i + 1)); done
  rmdir "$1" 2>/dev/null
}

run_job() { # N WORK
  local n=$1 work=$2 cg=/sys/fs/cgroup/t2r-job-$1 pid status aborted="" dirty=""
  echo "$work" > "$state_dir/current"   # where the heartbeat writes
  mkdir "$cg" || return 97
  (cd "$work" && export T2R_WORK="$work" &&
     exec sh -c 'echo $$ > "$1/cgroup.procs" && exec sh "$2"' job "$cg" "$work/job-$T2R_HOST.sh") \
    > "$work/output-$T2R_HOST.log" 2>&1 <&8 7<&- 8<&- &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [ -z "$aborted" ] && [ -s "$work/abort" ]; then
      read -r aborted < "$work/abort"; echo 1 > "$cg/cgroup.kill"
    fi
    pause 0.2
  done
  wait $pid; status=$?
  [ -z "$aborted" ] || status=$aborted
  # A pair guest whose command failed first asks whether the wire still works (as a guest of its own).
  if [ "$T2R_TOPOLOGY" = pair ] && [ "$status" != 0 ] && [ -z "$aborted" ]; then
    T2R_WORK=$work sh "$T2R_SOURCE_DIR/integration/testbed/wire-check.sh" "$status" \
      >> "$work/output-$T2R_HOST.log" 2>&1
  fi
  kill_job "$cg"
  rxe_quiet || dirty="the RDMA device kept sending or receiving for 30 s after the job ended"
  empty_scratch
  guest_state > "$state_dir/state.now"
  if ! cmp -s "$state_dir/state.0" "$state_dir/state.now"; then
    dirty="the job changed the guest's set-up: $(diff "$state_dir/state.0" "$state_dir/state.now" | grep '^[<>]' | tr '\n' ' ' | cut -c1-300)"
  fi
  echo "$session" > "$state_dir/current"
  # dirty-HOST before exit-HOST: the host reads dirty-HOST as soon as every exit file is there. Each
  # whole or not at all: the host may look between a file's creation and its write.
  if [ -n "$dirty" ]; then
    echo "job $n ($work): $dirty" > "$session/dirty-$T2R_HOST.tmp" &&
      mv "$session/dirty-$T2R_HOST.tmp" "$session/dirty-$T2R_HOST"
  fi
  echo "$status" > "$work/exit-$T2R_HOST.tmp" && mv "$work/exit-$T2R_HOST.tmp" "$work/exit-$T2R_HOST"
  [ -z "$dirty" ]
}

uptime_s() { local up _; read -r up _ < /proc/uptime; echo "${up%%.*}"; }
echo ready > "$session/ready-$T2R_HOST"
n=1
idle_since=$(uptime_s)
while :; do
  if [ -f "$session/job-$n" ]; then
    read -r work < "$session/job-$n"
    run_job "$n" "$work" || break
    n=$((n + 1))
    idle_since=$(uptime_s)
    continue
  fi
  [ ! -e "$session/stop" ] || break
  if [ $(( $(uptime_s) - idle_since )) -ge "${T2R_SESSION_IDLE:-600}" ]; then
    touch "$session/closing-$T2R_HOST"
    [ -f "$session/job-$n" ] || break   # a job published just now still runs
    continue
  fi
  pause 0.2
done
echo "session guest $T2R_HOST: done after $((n - 1)) jobs" > "$session/done-$T2R_HOST"
