#!/bin/sh
# bench-syscalls-run.sh SHIM RULES CLIENTS SHORT LONG ROUNDS [ROLE]: the guests' half of
# integration/bench-syscalls.sh. For each round and each mode (tcp: no module; rdma: the module with
# RULES), redis-server and redis-benchmark -t get -c CLIENTS each run under `strace -f -c`, once for
# SHORT requests and once for LONG; the difference of the two runs' counts, over LONG - SHORT, is the
# system calls a request costs each end with the connections' setup and teardown taken out. Prints a
# "result" line per round and mode, and the calls that make up most of it. ROLE: both (default: one
# guest runs both ends), or server / client (the pair: guest A the server, B the client, in step
# through files in $T2R_WORK).
set -u
shim=$1 rules=$2 clients=$3 short=$4 long=$5 rounds=$6 role=${7:-both}
ln -sf /usr/bin/redis-check-rdb /tmp/redis-server
server_cmd="/tmp/redis-server --port 6390 --bind $T2R_SELF --protected-mode no --save '' --appendonly no --dir /tmp"
host=$T2R_SELF
[ "$role" = client ] && host=$T2R_PEER

# BENCH_TRACER: strace (default: strace -f -c, which stops the process at every call, so a timed spin
# runs out after a few of them) or perf (perf trace -s: the kernel counts, the process runs at speed).
tracer=${BENCH_TRACER:-strace}
if [ "$tracer" = perf ]; then
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
fi
traced() { # OUT COMMAND...
  out=$1
  shift
  if [ "$tracer" = perf ]; then
    perf trace -s -o "$out" -- "$@"
  else
    strace -f -c -o "$out" "$@"
  fi
}

# The tracer's summary as "name calls" lines (perf's: one table per thread, summed).
calls_of() {
  if [ "$tracer" = perf ]; then
    awk '$1 ~ /^[a-z_0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 8 { n[$1] += $2 } END { for (k in n) print k, n[k] }' "$1"
  else
    awk '$NF ~ /^[a-z_0-9]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { print $NF, $4 }' "$1"
  fi
}

# Waits (up to 10 min) for the other guest's file $T2R_WORK/$1.
await() {
  i=0
  until [ -e "$T2R_WORK/$1" ]; do
    i=$((i + 1)); [ $i -lt 6000 ] || { echo "bench-syscalls: no $1 from the other guest"; exit 1; }
    sleep 0.1
  done
}

# The server's part of one run: redis-server under strace until the client's run is over (`done`: the
# client's step is done; a function for the loop guest, a file from the pair's client).
serve() { # MODE N TAG [env...]
  mode=$1 n=$2 tag=$3
  shift 3
  rm -f /tmp/redis.out
  traced /tmp/strace-server.txt env "$@" TCP2RDMA_LOG=/tmp/shim-server.log sh -c "exec $server_cmd" > /tmp/redis.out 2>&1 &
  i=0
  until grep -q 'Ready to accept' /tmp/redis.out 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 600 ] || { echo "bench-syscalls: redis never became ready:"; cat /tmp/redis.out; exit 1; }
    sleep 0.1
  done
  if [ "$role" = both ]; then
    bench "$mode" "$n" "$@"
  else
    touch "$T2R_WORK/ready-$tag"
    await "done-$tag"
  fi
  pkill -TERM -x redis-server  # not -f: strace's own command line names it too
  wait
  calls_of /tmp/strace-server.txt > "/tmp/sys-$mode-$n-server"
}

# The client's part: redis-benchmark under strace.
bench() { # MODE N [env...]
  mode=$1 n=$2
  shift 2
  traced /tmp/strace-client.txt env "$@" TCP2RDMA_LOG=/tmp/shim-client.log \
    redis-benchmark -h "$host" -p 6390 -c "$clients" -n "$n" -t get -q > /tmp/bench.out 2>&1
  calls_of /tmp/strace-client.txt > "/tmp/sys-$mode-$n-client"
}

# One run of N requests: the counts of this guest's ends in /tmp/sys-MODE-N-{server,client}.
one() { # MODE N TAG [env...]
  case $role in
    both | server) serve "$@" ;;
    client)
      mode=$1 n=$2 tag=$3
      shift 3
      await "ready-$tag"
      bench "$mode" "$n" "$@"
      touch "$T2R_WORK/done-$tag" ;;
  esac
}

# The calls a request costs, per system call, from the two runs: "name per-request" lines, largest first.
per_request() { # MODE SIDE
  awk -v d=$((long - short)) 'FNR == NR { a[$1] = $2; next } { b[$1] = $2 }
       END { for (k in b) { x = (b[k] - a[k]) / d; if (x >= 0.05 || x <= -0.05) printf "%s %.2f\n", k, x } }' \
    "/tmp/sys-$1-$short-$2" "/tmp/sys-$1-$long-$2" | sort -k2 -rn
}

total() { awk '{ s += $2 } END { printf "%.2f", s }'; }
# The guest's clock is read by system calls (no vDSO clock under emulation); on a host with one they
# cost none: the totals are given without them too.
without_clock() { grep -v -E '^(gettimeofday|clock_gettime|time) '; }

# This guest's ends' per-request counts, as "SIDE: total without-clock" words, and the top calls.
report() { # MODE
  words="" tops=""
  for side in server client; do
    [ "$role" = both ] || [ "$role" = "$side" ] || continue
    words="$words $side=$(per_request "$1" "$side" | total) ${side}_without_clock=$(per_request "$1" "$side" | without_clock | total) on_rdma_$side=$(grep -c 'upgraded to rdma' "/tmp/shim-$side.log" 2>/dev/null)"
    tops="$tops
  $side: $(per_request "$1" "$side" | head -8 | tr '\n' ' ')"
  done
  echo "result round=$round mode=$1 clients=$clients$words$tops"
}

for round in $(seq "$rounds"); do
  for mode in tcp rdma; do
    : > /tmp/shim-server.log; : > /tmp/shim-client.log
    for n in "$short" "$long"; do
      if [ "$mode" = tcp ]; then
        one tcp "$n" "$round-$mode-$n"
      else
        one rdma "$n" "$round-$mode-$n" LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules"
      fi
    done
    report "$mode"
  done
done
