#!/bin/sh
# bench-rr-client.sh SHIM RULES: the client guest's half of integration/bench-rr.sh. For ROUNDS rounds
# (default 3) it runs every request/response load once against the server guest's TCP reference
# (no module at either end: kernel TCP) and once under the module against the same server's RDMA
# port, and prints one "result" line per run:
#   result round=R test=T mode=tcp|rdma rate=... p50=... p99=... on_rdma=N on_tcp=N
# rate in requests (or keys, or messages) per second, latencies in microseconds ("-" where the tool
# gives none), and the connections the module's log shows on RDMA and staying TCP (0 and 0 on tcp).
# The loads: redis-benchmark SET and GET at -c 1, 8, 50 and 1000 (-P 1); memcslap get and set with 8
# threads; wrk -t2 -c32 keep-alive against nginx; sockperf ping-pong and under-load (--mps 2000),
# 64 B; and ib_send_lat 64 B (its t_typical as p50), the RDMA reference of the ping-pong.
set -u
shim=$1 rules=$2
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/wait-servers.sh" || exit 1
sleep 1  # nginx's workers make their RDMA listeners at their first epoll registration
ulimit -Hn 1048576 2>/dev/null; ulimit -Sn 65536
peer=$T2R_PEER
log=/tmp/bench-rr-client.log

# emit ROUND TEST MODE RATE P50 P99: one result line, with the connections the module logged.
emit() {
  rdma=0 tcp=0
  if [ "$3" = rdma ]; then rdma=$(grep -c 'upgraded to rdma' "$log"); tcp=$(grep -c 'stays tcp' "$log"); fi
  echo "result round=$1 test=$2 mode=$3 rate=${4:--} p50=${5:--} p99=${6:--} on_rdma=$rdma on_tcp=$tcp"
}

# under MODE CMD...: CMD with the module (rdma) or without (tcp), its log fresh.
under() {
  mode=$1
  shift
  : > "$log"
  if [ "$mode" = rdma ]; then
    env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" "$@"
  else
    env -u LD_PRELOAD "$@"
  fi
}

redis() { # ROUND MODE PORT CLIENTS REQUESTS
  out=$(under "$2" redis-benchmark -h "$peer" -p "$3" -c "$4" -n "$5" -t set,get -P 1 --csv 2>/dev/null | tr -d '"')
  for t in SET GET; do
    # test,rps,avg,min,p50,p95,p99,max (milliseconds)
    line=$(echo "$out" | grep "^$t," | tail -1)
    rate=$(echo "$line" | cut -d, -f2)
    p50=$(echo "$line" | cut -d, -f5 | awk '{ if ($1 != "") printf "%.0f", $1 * 1000 }')
    p99=$(echo "$line" | cut -d, -f7 | awk '{ if ($1 != "") printf "%.0f", $1 * 1000 }')
    emit "$1" "redis-$(echo $t | tr A-Z a-z)-c$4" "$2" "$rate" "$p50" "$p99"
  done
}

memcslap_run() { # ROUND MODE PORT TEST
  out=$(under "$2" memcslap --servers="$peer:$3" --concurrency=8 --execute-number=1000 --test="$4" 2>&1)
  rate=$(echo "$out" | awk -v t="$4" '$0 ~ "Time to " t " " { for (i = 1; i <= NF; ++i) if ($i == "keys") k = $(i - 1); s = $(NF - 1); if (s > 0) printf "%.0f", k / s }')
  emit "$1" "memcslap-$4-c8" "$2" "$rate"
}

wrk_run() { # ROUND MODE PORT
  out=$(under "$2" wrk -t2 -c32 -d5s --latency "http://$peer:$3/small" 2>&1)
  rate=$(echo "$out" | awk '/^Requests\/sec:/ { printf "%.0f", $2 }')
  # wrk's latency lines: "50%  1.23ms" (us, ms or s)
  to_us='function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1000000; return v }'
  p50=$(echo "$out" | awk "$to_us"' $1 == "50%" { printf "%.0f", us($2) }')
  p99=$(echo "$out" | awk "$to_us"' $1 == "99%" { printf "%.0f", us($2) }')
  emit "$1" "nginx-wrk-c32" "$2" "$rate" "$p50" "$p99"
}

sockperf_run() { # ROUND MODE PORT pp|ul
  extra=""
  [ "$4" = ul ] && extra="--mps 2000"
  out=$(under "$2" sockperf "$4" --tcp -i "$peer" -p "$3" -t 5 -m 64 $extra 2>&1)
  # Ping-pong: round trips a second. Under load the rate is the one asked for (--mps), and what
  # sockperf counts as received is only its latency samples: no rate.
  rate=-
  [ "$4" = pp ] && rate=$(echo "$out" | grep -o 'ReceivedMessages=[0-9]*' | tail -1 | awk -F= '{ printf "%.0f", $2 / 5 }')
  p50=$(echo "$out" | awk '/percentile 50.000/ { printf "%.1f", $NF }')
  p99=$(echo "$out" | awk '/percentile 99.000/ { printf "%.1f", $NF }')
  emit "$1" "sockperf-$4-64B" "$2" "$rate" "$p50" "$p99"
}

# calls TEST MODE PORT REQUESTS-PATTERN CMD...: CMD once more under `perf trace -s` (BENCH_CALLS=1: the
# kernel counts every thread's calls while the program runs at speed; `strace -f` stops a thread at
# each call, which lengthens every lock's hold: memcslap's eight threads showed 5.8 futex calls a
# request under it against 0.3 under perf), and two "calls" lines, the client's system calls (every
# thread, setup and teardown included) and the server's (every process listening on PORT, during
# the run: bench-calls-server.sh in the server guest), over the requests the client's output reports
# (REQUESTS-PATTERN: an awk program that prints that count).
calls() {
  t=$1 mode=$2 port=$3 pattern=$4
  shift 4
  ask=$T2R_WORK/calls-$t-$mode
  rm -f "$ask.server" "$ask.traced" "$ask.done" "$ask.written"
  echo "$port" > "$ask.port"
  i=0; until [ -e "$ask.traced" ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
  out=$(under "$mode" perf trace -s -o /tmp/bench-rr-calls "$@" 2>&1)
  touch "$ask.done"
  i=0; until [ -e "$ask.written" ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
  requests=$(echo "$out" | awk "$pattern")
  calls_line "$t" "$mode" client "${requests:-0}" /tmp/bench-rr-calls
  calls_line "$t" "$mode" server "${requests:-0}" "$ask.server"
}

# calls_line TEST MODE SIDE REQUESTS SUMMARY: perf trace's summary (one table per thread) as a
# "calls" line: calls a request, and the four commonest (every call with BENCH_CALLS_ALL=1).
calls_line() {
  [ -s "$5" ] || { echo "calls test=$1 mode=$2 side=$3 per_request=- (not counted)"; return; }
  awk -v t="$1" -v m="$2" -v side="$3" -v n="$4" -v shown="$([ "${BENCH_CALLS_ALL:-0}" = 1 ] && echo 99 || echo 4)" '
    $1 ~ /^[a-z_0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 8 { calls[$1] += $2; total += $2 }
    END {
      if (n + 0 == 0) { print "calls test=" t " mode=" m " side=" side " per_request=- (no requests counted)"; exit }
      top = ""; for (k = 0; k < shown; ++k) { best = ""; for (s in calls) if (best == "" || calls[s] + 0 > calls[best] + 0) best = s
        if (best == "") break; top = top sprintf(" %s %.2f", best, calls[best] / n); delete calls[best] }
      printf "calls test=%s mode=%s side=%s requests=%d per_request=%.2f:%s\n", t, m, side, n, total / n, top
    }' "$5"
}

# BENCH_LOADS (an extended regular expression, default every load): the counted runs of the loads
# whose test name matches it, alone.
counted() { echo "$1" | grep -Eq "${BENCH_LOADS:-.}"; }

for r in $(seq "${ROUNDS:-3}"); do
  for c in 1 8 50 1000; do
    case $c in 1) n=2000 ;; 8) n=10000 ;; *) n=20000 ;; esac
    redis "$r" tcp 5020 "$c" "$n"
    redis "$r" rdma 5010 "$c" "$n"
  done
  for t in get set; do
    memcslap_run "$r" tcp 5021 "$t"
    memcslap_run "$r" rdma 5011 "$t"
  done
  wrk_run "$r" tcp 5029
  wrk_run "$r" rdma 5019
  for t in pp ul; do
    sockperf_run "$r" tcp 5022 "$t"
    sockperf_run "$r" rdma 5012 "$t"
  done
  lat=$(ib_send_lat -d rxe0 -p 5402 -s 64 -n 2000 "$peer" 2>/dev/null | awk '/^ *64 +[0-9]+ / { print $5 }')
  emit "$r" "sockperf-pp-64B" ib_send_lat "-" "$lat" "-"
done
if [ "${BENCH_CALLS:-0}" = 1 ]; then
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
  for mode in tcp rdma; do
    port=5020; [ $mode = rdma ] && port=5010
    counted redis-get-c8 && calls redis-get-c8 $mode $port '/GET/ { n = 10000 } END { print n }' redis-benchmark -h "$peer" -p $port -c 8 -n 10000 -t get -P 1 --csv
    port=5021; [ $mode = rdma ] && port=5011
    counted memcslap-get-c8 && calls memcslap-get-c8 $mode $port '/Time to get/ { for (i = 1; i <= NF; ++i) if ($i == "keys") print $(i - 1) }' memcslap --servers="$peer:$port" --concurrency=8 --execute-number=1000 --test=get
    port=5029; [ $mode = rdma ] && port=5019
    counted nginx-wrk-c32 && calls nginx-wrk-c32 $mode $port '/requests in/ { print $1 }' wrk -t2 -c32 -d5s "http://$peer:$port/small"
    port=5022; [ $mode = rdma ] && port=5012
    counted sockperf-pp-64B && calls sockperf-pp-64B $mode $port '!n && match($0, /ReceivedMessages=[0-9]+/) { n = substr($0, RSTART + 17, RLENGTH - 17) } END { print n + 0 }' sockperf pp --tcp -i "$peer" -p $port -t 5 -m 64
    # The same client waiting in poll() rather than in a blocking read (-F, which takes its
    # connections from a file).
    printf 'T:%s:%s\n' "$peer" $port > /tmp/bench-rr-sockperf.list
    counted sockperf-pp-poll-64B && calls sockperf-pp-poll-64B $mode $port '!n && match($0, /ReceivedMessages=[0-9]+/) { n = substr($0, RSTART + 17, RLENGTH - 17) } END { print n + 0 }' sockperf pp -f /tmp/bench-rr-sockperf.list -F poll -t 5 -m 64
  done
fi
touch "$T2R_WORK/calls-over"
