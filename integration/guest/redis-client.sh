#!/bin/sh
# redis-client.sh HOST PORT: the client half of the redis test (Debian's redis-cli and
# redis-benchmark under the shim, rules in TCP2RDMA_RULES). A 1 MB value set with redis-cli must come
# back byte for byte with GET, and redis-benchmark (hiredis: non-blocking connects, its own event
# loop) must finish its SET and GET runs; every connection must have been upgraded, and RDMA packets
# must have moved (app-run.sh checks both for each command). Then BGSAVE makes redis fork, alone and
# under the benchmark's load: its connections stay on RDMA.
set -eu
here=$(dirname "$0")
log="$T2R_WORK/shim-$T2R_HOST.log"
head -c 1000000 /dev/urandom | base64 -w0 > /tmp/value
T2R_EXPECT_OUTPUT='^OK$' sh "$here/app-run.sh" 1 100 redis-cli -h "$1" -p "$2" -x SET big < /tmp/value
before=$(grep -c 'upgraded to rdma' "$log")
env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" redis-cli -h "$1" -p "$2" --raw GET big | head -c -1 > /tmp/got
[ "$(grep -c 'upgraded to rdma' "$log")" -eq $((before + 1)) ] || { echo "redis-client: GET was not upgraded"; exit 1; }
cmp /tmp/value /tmp/got
echo "redis-client: the 1 MB value came back intact over RDMA ($(sha256sum < /tmp/got | cut -c1-16)...)"
# 4 clients per test and one that asks for the server's configuration: at least 9 connections.
T2R_EXPECT_OUTPUT='GET: [0-9.]+ requests per second' \
  sh "$here/app-run.sh" 9 1000 redis-benchmark -h "$1" -p "$2" -c 4 -n 2000 -t set,get -q
# Each connection is decided and upgraded once: hiredis's second connect() must not start another.
if grep 'stays tcp' "$log"; then echo "redis-client: a connection logged 'stays tcp'"; exit 1; fi
# BGSAVE: redis forks while this connection is on RDMA. The child never touches it, so it stays on
# RDMA in redis, lent to the child and never moved (docs/architecture.md, "Forks"): no log line of
# either end says 'back on tcp', and redis's log says what it lent. The value is still there after.
T2R_EXPECT_OUTPUT='^Background saving started$' sh "$here/app-run.sh" 1 1 redis-cli -h "$1" -p "$2" BGSAVE
sleep 1
if cat "$T2R_WORK"/shim-*.log | grep 'back on tcp'; then echo "redis-client: BGSAVE moved a connection back to TCP"; exit 1; fi
cat "$T2R_WORK"/shim-*.log | grep -q 'connections lent to child' || { echo "redis-client: redis lent nothing at its fork"; exit 1; }
env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" redis-cli -h "$1" -p "$2" --raw GET big | head -c -1 > /tmp/got
cmp /tmp/value /tmp/got
echo "redis-client: after BGSAVE the value came back intact"
# BGSAVE under load: redis-benchmark's 8 clients run while redis forks for three snapshots (one every
# 0.7 s). Every fork lends the benchmark's connections to its child, which never touches them: none
# moves back to TCP, and the benchmark ends without an error.
lent_before=$(cat "$T2R_WORK"/shim-*.log | grep -c 'connections lent to child')
(for i in 1 2 3; do
  sleep 0.7
  env LD_PRELOAD="$T2R_SHIM" TCP2RDMA_LOG="$log" redis-cli -h "$1" -p "$2" BGSAVE > /dev/null || true
done) &
saver=$!
T2R_EXPECT_OUTPUT='GET: [0-9.]+ requests per second' \
  sh "$here/app-run.sh" 9 1000 redis-benchmark -h "$1" -p "$2" -c 8 -n 2000 -t set,get -q
wait $saver
lent=$(( $(cat "$T2R_WORK"/shim-*.log | grep -c 'connections lent to child') - lent_before ))
if cat "$T2R_WORK"/shim-*.log | grep 'back on tcp'; then echo "redis-client: a fork under load moved a connection back to TCP"; exit 1; fi
[ "$lent" -ge 2 ] || { echo "redis-client: only $lent forks lent connections under load"; exit 1; }
echo "redis-client: $lent forks under load, every connection stayed on RDMA"
