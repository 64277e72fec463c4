#!/bin/sh
# redis-suite-run.sh SHIM RULES SUITE SKIPS ROLE: the guests' half of integration/redis-suite.sh.
# server (A): two redis servers under the module with their built-in snapshot settings and the
# switches the suite's external mode needs; 6390 is on RDMA by the rules, 6391 is not named there
# and stays on TCP. Waits until the client is done, then prints the forks each made and what the
# server's log says of its connections; fails if a server died.
# client (B): a writable copy of SUITE (runtest, tests/; src/ links to Debian's binaries for the
# units that run redis-cli and redis-benchmark), then the suite in external mode, under the module,
# against 6391 (tcp) and then 6390 (rdma), each with the tests named in SKIPS left out. Prints each
# run's counts, the tests whose outcome differs, what the client's log says and rxe's counters.
set -u
shim=$1 rules=$2 suite=$3 skips=$4 role=$5
shift 5  # the rest: more runtest arguments (--single UNIT ...)
count() { grep -c "$1" "$2" 2>/dev/null || true; }
under_module() { env LD_PRELOAD="$shim" TCP2RDMA_RULES="$rules" TCP2RDMA_LOG="$T2R_WORK/shim-$T2R_HOST.log" "$@"; }
if [ "$role" = server ]; then
  ln -sf /usr/bin/redis-check-rdb /tmp/redis-server
  for port in 6390 6391; do
    mkdir -p "/tmp/r-$port"
    under_module /tmp/redis-server --port $port --bind 0.0.0.0 --protected-mode no --dir "/tmp/r-$port" \
      --enable-debug-command yes --enable-protected-configs yes --enable-module-command yes \
      > "$T2R_WORK/redis-$port.log" 2>&1 &
    echo $! > "/tmp/pid-$port"
  done
  here=$(cd "$(dirname "$0")" && pwd)
  for port in 6390 6391; do
    sh "$here/wait-listening.sh" "$T2R_WORK/redis-$port.log" "Ready to accept" || exit 1
  done
  touch "$T2R_WORK/ready"
  until [ -e "$T2R_WORK/done" ]; do sleep 1; done
  status=0
  for port in 6390 6391; do
    echo "result server $port forks=$(count 'Background saving started\|Background append only file rewriting started' "$T2R_WORK/redis-$port.log")"
    kill -0 "$(cat /tmp/pid-$port)" 2>/dev/null || { echo "result error: redis-server $port died"; tail -n 30 "$T2R_WORK/redis-$port.log"; status=1; }
  done
  log="$T2R_WORK/shim-a.log"
  echo "result server log: on_rdma=$(count 'upgraded to rdma' "$log") back_on_tcp=$(count 'back on tcp' "$log") back_on_rdma=$(count 'back on rdma' "$log") failed=$(count 'failed\|reset' "$log") stays_tcp=$(count 'stays tcp' "$log")"
  pkill -TERM -f 'redis-server' 2>/dev/null
  exit $status
fi

work=/tmp/redis-suite
cp -r "$suite" "$work" && mkdir -p "$work/src" || exit 1
ln -s /usr/bin/redis-cli "$work/src/redis-cli"
ln -s /usr/bin/redis-benchmark "$work/src/redis-benchmark"
ln -s /usr/bin/redis-check-rdb "$work/src/redis-server"
until [ -e "$T2R_WORK/ready" ]; do sleep 0.1; done
# One line a test: its outcome and name, colours and times taken off.
outcomes() { sed 's/\x1b\[[0-9;]*m//g' "$1" | sed -n 's/^\[\(ok\|err\|exception\|skip\|ignore\)\]: \(.*\)/\1 \2/p' |
  sed 's/ ([0-9]* ms)$//; s/ in tests\/[^ ]*\.tcl$//' | sort; }
before=$(sh "$(dirname "$0")/rdma-counters" | awk '$1=="sent_pkts"{print $2}')
for mode in tcp rdma; do
  port=6391; [ $mode = rdma ] && port=6390
  start=$(date +%s)
  (cd "$work" && under_module ./runtest --host "$T2R_PEER" --port $port --clients 2 --timeout 600 \
    --skipfile "$skips" "$@" > "$T2R_WORK/suite-$mode.log" 2>&1)
  echo "$?" > "$T2R_WORK/suite-$mode.status"
  outcomes "$T2R_WORK/suite-$mode.log" > "$T2R_WORK/outcomes-$mode.txt"
  echo "result suite $mode (port $port): status $(cat "$T2R_WORK/suite-$mode.status"), $(($(date +%s) - start)) s," \
    "ok $(grep -c '^ok ' "$T2R_WORK/outcomes-$mode.txt"), err $(grep -c '^err ' "$T2R_WORK/outcomes-$mode.txt")," \
    "exception $(grep -c '^exception ' "$T2R_WORK/outcomes-$mode.txt")"
done
after=$(sh "$(dirname "$0")/rdma-counters" | awk '$1=="sent_pkts"{print $2}')
echo "result rxe sent_pkts over both runs: $((after - before))"
status=0
# A test whose outcome differs is run again alone on both ports (--single its unit --only its name):
# some of the suite's tests time themselves, and an emulated guest misses their marks now and then.
# It counts as a difference only when it differs again.
run_alone() {  # PORT UNIT NAME: prints the test's outcome
  (cd "$work" && under_module ./runtest --host "$T2R_PEER" --port "$1" --clients 1 --single "$2" --only "$3" 2>&1) |
    sed 's/\x1b\[[0-9;]*m//g' | sed -n 's/^\[\(ok\|err\|exception\|skip\|ignore\)\]: .*/\1/p' | head -n 1
}
diff "$T2R_WORK/outcomes-tcp.txt" "$T2R_WORK/outcomes-rdma.txt" | sed -n 's/^[<>] [a-z]* //p' | sort -u > /tmp/differing
: > "$T2R_WORK/outcomes.diff"
while IFS= read -r name; do
  [ -n "$name" ] || continue
  file=$(sed 's/\x1b\[[0-9;]*m//g' "$T2R_WORK/suite-tcp.log" "$T2R_WORK/suite-rdma.log" |
    grep -F "]: $name in tests/" | head -n 1 | sed 's/.* in tests\/\(.*\)\.tcl$/\1/')
  again_tcp=-; again_rdma=-
  if [ -n "$file" ]; then again_tcp=$(run_alone 6391 "$file" "$name"); again_rdma=$(run_alone 6390 "$file" "$name"); fi
  line="$name (${file:-unit unknown}): tcp $(grep -F " $name" "$T2R_WORK/outcomes-tcp.txt" | cut -d' ' -f1 | head -n 1),"
  line="$line rdma $(grep -F " $name" "$T2R_WORK/outcomes-rdma.txt" | cut -d' ' -f1 | head -n 1); alone: tcp ${again_tcp:-none}, rdma ${again_rdma:-none}"
  echo "$line" >> "$T2R_WORK/outcomes.diff"
  if [ "$again_tcp" = "$again_rdma" ] && [ -n "$again_tcp" ] && [ "$again_tcp" != - ]; then
    echo "result differed once, the same alone: $line"
  else
    echo "result error: differs: $line"; status=1
  fi
done < /tmp/differing
for mode in tcp rdma; do
  if [ "$(cat "$T2R_WORK/suite-$mode.status")" != 0 ] && grep -q '^exception ' "$T2R_WORK/outcomes-$mode.txt"; then
    echo "result error: the $mode run stopped on an exception; its end:"; tail -n 25 "$T2R_WORK/suite-$mode.log"; status=1
  fi
done
log="$T2R_WORK/shim-b.log"
on_rdma=$(count 'upgraded to rdma' "$log")
echo "result client log: on_rdma=$on_rdma back_on_tcp=$(count 'back on tcp' "$log") failed=$(count 'failed\|reset' "$log") stays_tcp=$(count 'stays tcp' "$log" ) (those to 6391 and the suite's own loopback ones among them)"
# The path: the suite's connections to 6390 went on RDMA, and rxe carried them.
[ "$on_rdma" -ge 1 ] && [ $((after - before)) -ge 1000 ] || { echo "result error: the suite's traffic did not go over rdma"; status=1; }
touch "$T2R_WORK/done"
sleep 3
exit $status
