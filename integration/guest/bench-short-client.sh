#!/bin/sh
# bench-short-client.sh SHIM RULES N BYTES PROCESSES: the client guest's half of
# integration/bench-short.sh. Runs short_connections.py (N connections one after another, BYTES echoed
# through each, one more connection held open) against the server guest's echo servers: without the
# module (kernel TCP, the reference), under it upgrading in the background (port 5030) and before
# connect() returns (5031); then PROCESSES processes of one connection each (as `curl` in a loop is) on
# each port. Each run prints a "result" line: its own measures; how many connections the client's log
# shows on RDMA, how many of those moved every byte on RDMA ("switched after 0 bytes sent and 0
# received on tcp"), and the upgrade's setup and switch times p50/p90 (ms, from connect() on); rxe's
# packets.
set -u
shim=$1 rules=$2 n=$3 bytes=$4 processes=$5
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/wait-servers.sh" || exit 1
pct() { # P: the P-th percentile of the numbers on standard input
  sort -n | awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; print v[i] }'
}
run() { # NAME PORT COUNT KEEP [env...]
  name=$1 port=$2 count=$3 keep=$4
  shift 4
  log=/tmp/bench-short-$name.log
  : > "$log"
  before=$("$here/rdma-counters" | awk '$1 == "sent_pkts" {print $2}')
  if [ "$keep" = 1 ]; then
    out=$(env "$@" TCP2RDMA_LOG="$log" python3 "$here/short_connections.py" "$T2R_PEER" "$port" "$count" "$bytes" 2>&1)
    status=$?
  else
    start=$(date +%s.%N) status=0 out=""
    i=0
    while [ $i -lt "$count" ]; do
      env "$@" SHORT_KEEP=0 TCP2RDMA_LOG="$log" python3 "$here/short_connections.py" "$T2R_PEER" "$port" 1 "$bytes" > /tmp/one.out 2>&1 || { status=1; out=$(cat /tmp/one.out); }
      i=$((i + 1))
    done
    out="$out processes=$count seconds=$(echo "$(date +%s.%N) - $start" | bc)"
  fi
  after=$("$here/rdma-counters" | awk '$1 == "sent_pkts" {print $2}')
  rdma=$(grep -c 'upgraded to rdma' "$log")
  whole=$(grep -c 'switched after 0 bytes sent and 0 received on tcp' "$log")
  setup=$(grep -o 'setup [0-9]* ms' "$log" | awk '{print $2}')
  switch=$(grep -o 'switch [0-9]* ms' "$log" | awk '{print $2}')
  echo "result run=$name status=$status $(echo "$out" | grep -o 'connections=.*\|processes=.*') on_rdma=$rdma all_bytes_on_rdma=$whole" \
    "setup_ms_p50/p90=$(echo "$setup" | pct 50)/$(echo "$setup" | pct 90) switch_ms_p50/p90=$(echo "$switch" | pct 50)/$(echo "$switch" | pct 90)" \
    "rdma_packets=$((after - before))"
  [ $status -eq 0 ] || echo "failed: $(echo "$out" | tail -2)"
  grep -o 'stays tcp (.*' "$log" | sed 's/ ([0-9]* ms)//' | sort | uniq -c | sort -rn | head -3 | sed 's/^/  why: /'
}
run tcp 5030 "$n" 1
run background 5030 "$n" 1 LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
run before-return 5031 "$n" 1 LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
run tcp-processes 5030 "$processes" 0
run background-processes 5030 "$processes" 0 LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
run before-return-processes 5031 "$processes" 0 LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
