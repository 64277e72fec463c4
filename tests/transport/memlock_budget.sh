#!/bin/sh
# memlock_budget.sh MANY_BINARY EXPECT_RDMA server|client: one end of rdma.stream.memlock_budget.pair.
# Both ends are unprivileged, with Debian's default RLIMIT_MEMLOCK (8 MiB), each asking for 1 MiB
# rings (which held 3 streams a side before the budget): 80 streams at once, 200000 checked bytes each
# way on each, over RDMA. Each stream's ring is sized to what the limit leaves
# (transport/pin_budget.h); stream_many prints the rings each side got.
many=$1
expect=$2
role=$3
# One run of stream_many as nobody with the default limit, under expect-rdma (rxe's counters).
run() {
  T2R_MIN_PKTS=8000 "$expect" setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
    sh -c "ulimit -l 8192 && exec env MANY_RING_LOG2=20 $many $*" > /tmp/memlock-budget.out 2>&1
}
if [ "$role" = server ]; then
  run server 7493 80 200000
else
  run client "$T2R_PEER" 7493 80 200000  # connect_to waits for the server's listener
fi
status=$?
cat /tmp/memlock-budget.out
[ $status -eq 0 ] || exit 1
# The budget, not luck: every ring is smaller than the 1 MiB asked for.
grep -q "^$role: 80 streams, 200000 bytes each way on each, all checked.*rings [0-9]*-[0-9]\{1,3\} KiB, the peer's [0-9]*-[0-9]\{1,3\} KiB" /tmp/memlock-budget.out
