#!/bin/sh
# ring_growth.sh PEER_BINARY: rings that start small and grow (docs/links.md, "Rings that grow").
#  1. both streams start with 4 KiB rings that may grow to 1 MiB, under a duplex transfer of random
#     write sizes (zero-copy and copies): every byte checked, and each side's ring must have grown
#     (PEER_EXPECT_GROWTH: the peer's bytes filled it, it offered, the peer adopted, the old ring went);
#  2. 1 KiB rings that may grow to 256 KiB under a slow reader: the move happens while the writer
#     keeps running out of room (PEER_EXPECT_STALLS), every byte checked.
#  3. three bursts with pauses of 2 s (keepalive 200 ms): the reader's ring grows, goes back to its
#     first size while the writer pauses, and grows again (PEER_EXPECT_SHRINK), every byte checked.
#  4. 32 bytes, then 64 KiB in one write into a 64 KiB ring whose reader read the 32 and then sleeps
#     a second: the writer waits only for the 32 bytes of room the reader owes it, which its update
#     gives; the ring must not grow (PEER_EXPECT_NO_GROWTH).
#  5. rings that cannot grow (64 KiB for good), both ends writing 3 MB before they read: neither
#     write returns unless the peer's bytes that fill a ring move out of it while its owner waits to
#     write (transport/stream_spill.cpp); kernel TCP's buffers take such messages. Every byte
#     checked, and some must have been spilled (by either end: which one is timing).
#  6. the same with rings that start at 4 KiB and may grow to 256 KiB: each owner offers its writer a
#     larger ring while that writer sleeps, armed, and waits for room; the offer must wake it (a
#     mailbox write completes nothing there), or both sleep for good, each owner waiting to write and
#     making no spill while its offer is on its way.
peer=$1
run() { # PORT SEED BYTES ANSWER SERVER_ARG CLIENT_PATTERN ENV...
  port=$1 seed=$2 bytes=$3 answer=$4 slow=$5 pattern=$6
  shift 6
  env "$@" "$peer" server "$port" "$seed" "$bytes" "$answer" $slow > "/tmp/growth-server-$port.out" 2>&1 &
  server=$!
  env "$@" "$peer" client "$T2R_PEER" "$port" "$seed" "$bytes" "$answer" "$pattern"
  client_status=$?
  wait "$server"
  server_status=$?
  cat "/tmp/growth-server-$port.out"
  echo "ring_growth: port $port: client $client_status, server $server_status"
  [ "$client_status" -eq 0 ] && [ "$server_status" -eq 0 ]
}
run 7481 21 12000000 9000000 "" random PEER_RING_LOG2=20 PEER_START_RING_LOG2=12 PEER_EXPECT_GROWTH=1 || exit 1
run 7482 22 2000000 0 slow random PEER_RING_LOG2=18 PEER_START_RING_LOG2=10 PEER_EXPECT_STALLS=1 || exit 1
run 7483 23 12000000 3000000 "" pauses PEER_RING_LOG2=20 PEER_START_RING_LOG2=12 PEER_KEEPALIVE_MS=200 PEER_EXPECT_SHRINK=1 || exit 1
run 7484 24 65568 0 lazy exact-fit PEER_RING_LOG2=20 PEER_START_RING_LOG2=16 PEER_EXPECT_NO_GROWTH=1 || exit 1

# 5 and 6: a hang here is the bug, so both ends are bounded in time.
write_first() { # PORT SEED ENV...: both ends write 3 MB before they read; some bytes must be spilled.
  port=$1 seed=$2
  shift 2
  timeout 60 env "$@" "$peer" server "$port" "$seed" 3000000 3000000 write-first > "/tmp/growth-server-$port.out" 2>&1 &
  server=$!
  timeout 60 env "$@" "$peer" client "$T2R_PEER" "$port" "$seed" 3000000 3000000 write-first \
    > "/tmp/growth-client-$port.out" 2>&1
  client_status=$?
  wait "$server"
  server_status=$?
  cat "/tmp/growth-server-$port.out" "/tmp/growth-client-$port.out"
  spilled=$(sed -n 's/.*spilled \([0-9]*\) bytes.*/\1/p' "/tmp/growth-server-$port.out" "/tmp/growth-client-$port.out" |
            awk '{ s += $1 } END { print s + 0 }')
  echo "ring_growth: port $port: client $client_status, server $server_status, spilled $spilled bytes"
  [ "$client_status" -eq 0 ] && [ "$server_status" -eq 0 ] && [ "$spilled" -gt 0 ]
}
write_first 7485 25 PEER_RING_LOG2=16 || exit 1
write_first 7486 26 PEER_RING_LOG2=18 PEER_START_RING_LOG2=12
