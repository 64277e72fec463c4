#!/bin/sh
# pin_limit_root.sh SHIM RULES HOST PORT N: the client half of integration.pin_limit_root.pair. A root
# python3 (CAP_IPC_LOCK: no RLIMIT_MEMLOCK) under the module, rules asking for 1 MiB rings, opens N
# connections (before-return), keeps them all open and echoes 320 KiB through each (sent while the
# answer is read): 200 streams of 2.1 MiB would pin more than a quarter of the guest's 1 GiB (and
# 450, before the budget, more than all of it: its OOM killer ended the application). Rings start at 64 KiB and grow for the echoes (five times a ring: bulk,
# docs/links.md), while the budget lets them; the module pins at most a quarter of the
# machine's memory (transport/pin_budget.h): a ring the budget cannot grow stays small (or, at setup,
# the connection stays TCP saying so), and every byte of every echo is exact. The process must end up
# pinning more than a sixteenth of the machine (rings grew: the first rings of 200 streams pin about
# 27 MB) and no more than a quarter. (How many grow varies: a reader that keeps up leaves its writer
# no full window; with 1 GiB about 85 grown streams reach the budget's growth cap.)
set -u
here=$(cd "$(dirname "$0")" && pwd)
guest=$here/../../../integration/guest
log=/tmp/shim-root.log
sh "$guest/wait-servers.sh" || exit 1
out=$(T2R_MIN_PKTS=1000 sh "$guest/expect-rdma" \
  env LD_PRELOAD="$1" TCP2RDMA_RULES="$2" TCP2RDMA_LOG=$log python3 "$here/memlock_many.py" "$3" "$4" "$5" 327680 2>&1)
status=$?
echo "$out"
upgraded=$(grep -c 'upgraded to rdma' $log)
limited=$(grep -c 'stays tcp (no room to pin another ring' $log)
echo "pin_limit_root: $upgraded of $5 connections upgraded, $limited stayed tcp for the pinning limit; rings:"
grep -o 'receive ring [0-9]* KiB, the peer.s [0-9]* KiB' $log | sort | uniq -c
grep 'stays tcp' $log | grep -v 'no room to pin' | head -5
[ $status -eq 0 ] || exit 1
[ "$upgraded" -ge 100 ] && [ $((upgraded + limited)) -eq "$5" ] || exit 1
# What the process pinned with all of them open: more than a sixteenth (grown), at most a quarter.
echo "$out" | awk '/all .* open: VmPin/ { pin = $6; total = $9 } END { exit !(pin > total / 16 && pin <= total / 4) }'
