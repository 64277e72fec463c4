#!/bin/sh
# memlock_many.sh SHIM RULES HOST PORT N: the client half of integration.memlock_many.pair. An
# unprivileged user's python3 with Debian's default RLIMIT_MEMLOCK (8 MiB), under the module with a
# rule asking for the default 1 MiB rings, opens N connections to an echo server run the same way
# (unprivileged, 8 MiB) and keeps them all open (memlock_many.py). Each must be on RDMA, with rings
# sized to the limit (transport/pin_budget.h): with 1 MiB rings three fitted.
set -u
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
sh "$guest/wait-servers.sh" || exit 1
T2R_MIN_PKTS=$(($5 * 10)) sh "$guest/expect-rdma" sh "$here/as_nobody.sh" 8192 \
  env LD_PRELOAD="$1" TCP2RDMA_RULES="$2" python3 "$here/memlock_many.py" "$3" "$4" "$5"
status=$?
upgraded=$(grep -c 'upgraded to rdma' /tmp/shim-nobody.log)
echo "memlock_many: $upgraded of $5 connections upgraded; rings the log shows:"
grep -o 'receive ring [0-9]* KiB, the peer.s [0-9]* KiB' /tmp/shim-nobody.log | sort | uniq -c
grep 'stays tcp' /tmp/shim-nobody.log | head -5
[ $status -eq 0 ] && [ "$upgraded" -eq "$5" ] || exit 1
# The budget sized them: no 1 MiB ring on either side.
! grep 'upgraded to rdma' /tmp/shim-nobody.log | grep -q 'ring 1024 KiB\|peer.s 1024 KiB'
