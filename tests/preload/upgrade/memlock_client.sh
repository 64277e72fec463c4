#!/bin/sh
# memlock_client.sh SHIM RULES HOST PORT: the client half of integration.memlock_stays_tcp.pair.
# OpenBSD nc under the shim, with a rule selecting RDMA, sends 10 MB while its RLIMIT_MEMLOCK (16 KiB)
# cannot hold a receive ring. Root has CAP_IPC_LOCK, so nc runs as nobody without capabilities. The
# connection must stay TCP, say why in the shim's log, and deliver every byte (the server side
# compares the sha256 left here).
set -u
head -c 10000000 /dev/urandom > /tmp/data
chmod 644 /tmp/data
sha256sum < /tmp/data | cut -d' ' -f1 > "$T2R_WORK/sent.sha256"
i=0
until setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
      sh -c "ulimit -l 16 && exec env LD_PRELOAD=$1 TCP2RDMA_RULES=$2 TCP2RDMA_LOG=/tmp/shim-nobody.log nc -N $3 $4 < /tmp/data 2> /tmp/nc.err"; do
  i=$((i + 1)); [ $i -lt 100 ] || { echo "memlock_client: nc never got through"; exit 1; }
  sleep 0.2
done
cat /tmp/shim-nobody.log
grep -q 'stays tcp (cannot register memory (RLIMIT_MEMLOCK))' /tmp/shim-nobody.log
# libibverbs warns on standard error when a process with such a limit touches it: the shim must not
# let it, so nc's own output is all there is.
if grep -q 'RLIMIT_MEMLOCK' /tmp/nc.err; then cat /tmp/nc.err; echo "memlock_client: nc's stderr gained a libibverbs warning"; exit 1; fi
