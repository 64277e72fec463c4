#!/bin/sh
# stress.sh SHIM RULES ROUNDS [MAX_BYTES [BR_CONNS BR_ROUNDS]]: the client guest's half of
# integration.stress.pair; the
# server guest runs stress_echo.py's asyncio echo server under the module on ports 5030 (upgrade:
# background) and 5031 (before-return), rules/stress.yaml.
#  1. Descriptors: with a soft limit of 128, one process opens connections until one fails, without
#     the module and with it (before-return: each is on RDMA before the next): the same error, and the
#     same number less at most two per RDMA device (librdmacm's own, docs/architecture.md). The
#     module's descriptors (six per connection) must take none of the application's.
#  2. Stress: ROUNDS rounds of 200 connections opened at once by one process, random sizes
#     (log-uniform, 1 B to MAX_BYTES, default 4 MiB) echoed byte for byte, half-close, upgrading in
#     the background; then BR_ROUNDS rounds (default ROUNDS) of BR_CONNS (default 200) with the client
#     upgrading before connect() returns. rxe must carry traffic without an RNR or retry error, and
#     the log must show upgrades. (Before-return costs an event-loop client one upgrade after the
#     other: 200 of them take minutes a round on the emulated testbed; CI runs fewer.)
set -eu
shim=$1 rules=$2 rounds=$3 max=${4:-4194304} br_conns=${5:-200} br_rounds=${6:-$3}
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../integration/guest
py="python3 $here/stress_echo.py"
log=$T2R_WORK/shim-$T2R_HOST.log
# In a sanitized run (ASAN_OPTIONS set, docs/testbed.md) python3's own memory left at exit is not the
# module's: leak checking stays with the instrumented test programs.
[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
under() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$log" "$@"; }
upgrades() { grep -c "$1.*upgraded to rdma" "$log" 2>/dev/null || true; }

sh "$guest/wait-servers.sh"
# The plain client asks the background server (a before-return server waits for its RDMA request).
plain=$(ulimit -Sn 128 && $py fill "$T2R_PEER" 5030 200)
shimmed=$(ulimit -Sn 128 && under $py fill "$T2R_PEER" 5031 200)
echo "stress: without the module: $plain"
echo "stress: with the module:    $shimmed ($(upgrades "'stress-before-return'") upgraded)"
count() { echo "$1" | sed 's/fill: \([0-9]*\) connections.*/\1/'; }
devices=$(ls /sys/class/infiniband | wc -l)
lost=$(( $(count "$plain") - $(count "$shimmed") ))
if [ "${plain#*stopped by: }" != "${shimmed#*stopped by: }" ] || [ $lost -lt 0 ] || [ $lost -gt $((2 * devices)) ]; then
  echo "stress: the module changed what the application could open"; exit 1
fi
[ "$(upgrades "'stress-before-return'")" -ge 100 ] || { echo "stress: too few upgraded"; exit 1; }
: > "$log"

seed=$(date +%s)
for mode in 5030:stress-background:200:$rounds 5031:stress-before-return:$br_conns:$br_rounds; do
  port=${mode%%:*} rest=${mode#*:}
  rule=${rest%%:*} rest=${rest#*:}
  conns=${rest%%:*} n=${rest#*:}
  echo "stress: $rule, port $port, $conns connections at once, $n rounds, seed $seed"
  # At least 10 packets sent per connection (its bytes, the echo's acknowledgements, credit updates,
  # the ends), not a fixed count: the sizes are random, and 20 connections (a sanitized run) once
  # moved 278 KB each way in all, 504 packets, below the fixed 1000 this used to ask for.
  T2R_MIN_PKTS=$((conns * n * 10)) under sh "$guest/expect-rdma" $py client "$T2R_PEER" "$port" "$conns" "$n" "$seed" "$max"
  echo "stress: $rule: $(upgrades "'$rule'") of $((conns * n)) connections upgraded; $(grep "'$rule'" "$log" | grep -c 'stays tcp') stayed tcp:"
  grep "'$rule'" "$log" | grep -o 'stays tcp (.*' | sed 's/ ([0-9]* ms)//' | sort | uniq -c | sed 's/^/stress:   /'
  [ "$(upgrades "'$rule'")" -ge 1 ] || { echo "stress: nothing upgraded"; exit 1; }
done
