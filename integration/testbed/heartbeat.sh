#!/bin/bash
# Started by guest-setup.sh: every 5 s one line on the shared work directory, which the harness shows
# when a guest hangs or its link stalls (integration/vm reads the link's counters from it, and the
# root qdisc: "netem" while a test cuts the wire on purpose):
#   TIME up UPTIME | NETDEV rx N tx N | rxe sent N rcvd N retry-exceeded N | available N MiB | qdisc NAME | PROGRAMS
# (available: MemAvailable, since a guest short of memory cannot refill its receive ring, and its peer's
# frames then wait: a stalled wire seen from the other side).
# Bash builtins wherever they do (one tc a beat, no sleep process): under TCG every process a guest
# starts costs tens of milliseconds of the host's CPU, which the tests need.
# A session guest (integration/vm --session) writes each beat to the work directory of the job it
# runs (session-runner.sh keeps its path in /run/t2r-session/current), and none while it waits.
set -f
counters=/sys/class/infiniband/rxe0/ports/1/hw_counters
mkfifo "/run/heartbeat-$T2R_HOST.fifo" 2>/dev/null
exec 7<> "/run/heartbeat-$T2R_HOST.fifo"
value() { local -n into=$1; into=""; read -r into 2>/dev/null < "$2"; }
beat_file() {
  local dir=$T2R_WORK
  [ -z "${T2R_SESSION:-}" ] || read -r dir 2>/dev/null < /run/t2r-session/current || dir=$T2R_WORK
  [ "$dir" != "${T2R_SESSION:-}" ] || return 1
  file=$dir/heartbeat-$T2R_HOST.log
}
root_qdisc() { # (the guest has no /dev/fd: no process substitution)
  local line shown IFS=$'\n'
  qdisc=""
  shown=$(tc qdisc show dev "$T2R_NETDEV" 2>/dev/null)
  for line in $shown; do
    if [[ $line == qdisc* && " $line " == *" root "* ]]; then IFS=' '; set -- $line; qdisc=$2; return; fi
  done
}
available_mib() { # MemAvailable, in MiB
  local key value unit
  available=""
  while read -r key value unit; do
    if [ "$key" = "MemAvailable:" ]; then available=$((value / 1024)); return; fi
  done < /proc/meminfo
}
programs() { # what runs, kernel threads left out
  local stat line comm pid ppid
  running=""
  set +f
  for stat in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null < "$stat" || continue
    comm=${line#*(}; comm=${comm%%)*}
    set -- ${line##*) }; ppid=$2
    pid=${stat#/proc/}; pid=${pid%/stat}
    { [ "$pid" = 2 ] || [ "$ppid" = 2 ]; } && continue
    case $comm in kthreadd|sleep|ps|tr|cut|grep|heartbeat.sh|tc) continue ;; esac
    running+="$comm "
  done
  set -f
  running=${running:0:160}
}
while :; do
  if beat_file; then
    printf -v now '%(%T)T' -1
    read -r up _ < /proc/uptime
    root_qdisc; programs; available_mib
    value rx "/sys/class/net/$T2R_NETDEV/statistics/rx_packets"
    value tx "/sys/class/net/$T2R_NETDEV/statistics/tx_packets"
    value sent $counters/sent_pkts; value rcvd $counters/rcvd_pkts; value retries $counters/retry_exceeded_err
    printf '%s up %s | %s rx %s tx %s | rxe sent %s rcvd %s retry-exceeded %s | available %s MiB | qdisc %s | %s\n' \
      "$now" "$up" "$T2R_NETDEV" "$rx" "$tx" "$sent" "$rcvd" "$retries" "$available" "$qdisc" "$running" >> "$file" 2>/dev/null
  fi
  read -r -t 5 -u 7 _
done
