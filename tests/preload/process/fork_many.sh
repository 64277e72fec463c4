#!/bin/sh
# fork_many.sh SHIM RULES: one process (python3, an unmodified Debian binary) holds four connections
# on RDMA and forks (loop VM, rule on_fork: tcp). Every connection goes back to TCP before the fork
# (the markers all go out first, so the peers answer together); then the child writes a line on each,
# and after it exits the parent writes one and closes. Each nc server must receive exactly its three
# lines in order, and the logs must show four upgrades and four moves on each side.
set -eu
shim="LD_PRELOAD=$1 TCP2RDMA_RULES=$2 TCP2RDMA_LOG=$T2R_WORK/shim-$T2R_HOST.log"
log="$T2R_WORK/shim-$T2R_HOST.log"
ports="5010 5011 5012 5013"
for p in $ports; do (env $shim nc -l $p > /tmp/got-$p 2> /tmp/nc-$p.err &); done
cat > /tmp/fork_many.py <<'PY'
import os, socket, time
socks = []
for port in (5010, 5011, 5012, 5013):
    for attempt in range(100):  # the servers may not listen yet
        try:
            socks.append(socket.create_connection(("10.77.0.1", port)))
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
for s in socks:
    s.sendall(b"before the fork\n")
pid = os.fork()
if pid == 0:
    for s in socks:
        s.sendall(b"from the child\n")
    os._exit(0)
os.waitpid(pid, 0)
for s in socks:
    s.sendall(b"from the parent\n")
    s.close()
PY
env $shim python3 /tmp/fork_many.py
printf 'before the fork\nfrom the child\nfrom the parent\n' > /tmp/want
for p in $ports; do
  i=0
  until [ "$(wc -l < /tmp/got-$p)" -ge 3 ] || [ $i -ge 100 ]; do i=$((i + 1)); sleep 0.1; done
  cmp /tmp/want /tmp/got-$p || { echo "fork_many: port $p got:"; cat /tmp/got-$p; exit 1; }
done
echo "fork_many: every connection got its three lines in order"
grep 'back on tcp' "$log" | sed 's/.*rdma: /fork_many: /'
[ "$(grep -c 'upgraded to rdma' "$log")" -eq 8 ]
[ "$(grep -c 'back on tcp for a child that uses it' "$log")" -eq 4 ]
[ "$(grep -c 'back on tcp from the parent at this process.s first use' "$log")" -eq 4 ]
[ "$(grep -c 'back on tcp (the peer moved)' "$log")" -eq 4 ]
