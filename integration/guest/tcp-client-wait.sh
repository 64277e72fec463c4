#!/bin/sh
# tcp-client-wait.sh: what a client without tcp2rdma costs a server under it. The server (Python,
# blocking calls: it makes no poll of its own) upgrades in the background; the client never asks for
# RDMA, so the server's connection waits the rule's upgrade_timeout (5 s) for a request, in the
# module's upgrade engine. Meanwhile the engine sleeps until its sweep, ten looks a second, where it
# once looked every 10 ms: strace counts the server's poll calls over 2 s of the wait (at most 60).
# The bytes are echoed exactly, on TCP, and the server's log says why the connection stayed there.
set -eu
port=5016
work=${T2R_WORK:?}
log=$work/server-shim.log
cat > "$work/echo_server.py" <<'EOF'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(4)
print("listening", file=sys.stderr, flush=True)
c, _ = s.accept()
while True:
    b = c.recv(65536)
    if not b:
        break
    c.sendall(b)
EOF
cat > "$work/slow_client.py" <<'EOF'
import hashlib, os, socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
got = b""
for i in range(2):
    data = os.urandom(100000)
    c.sendall(data)
    echoed = b""
    while len(echoed) < len(data):
        echoed += c.recv(65536)
    if hashlib.sha256(echoed).digest() != hashlib.sha256(data).digest():
        sys.exit("echo differs")
    if i == 0:
        print("first echo exact", file=sys.stderr, flush=True)
        time.sleep(6)  # past the server's wait for a request (upgrade_timeout)
print("echoes exact", flush=True)
EOF
LD_PRELOAD=${T2R_SHIM:?} TCP2RDMA_LOG=$log python3 "$work/echo_server.py" $port 2> "$work/server.err" &
server=$!
sh "$(dirname "$0")/wait-listening.sh" "$work/server.err"
python3 "$work/slow_client.py" "$T2R_SELF" $port 2> "$work/client.err" > "$work/client.out" &
client=$!
sh "$(dirname "$0")/wait-listening.sh" "$work/client.err" "first echo exact"
sleep 0.5
timeout -s INT 2 strace -f -c -e trace=poll,ppoll -o "$work/polls.txt" -p $server 2> /dev/null || true
wait $client
wait $server
cat "$work/client.out"
grep -q "echoes exact" "$work/client.out"
polls=$(awk '$NF == "poll" || $NF == "ppoll" { n += $4 } END { print n + 0 }' "$work/polls.txt")
echo "server's poll calls over 2 s of the wait: $polls"
[ "$polls" -le 60 ] || { echo "the engine looked $polls times in 2 s (at most 60)"; cat "$work/polls.txt"; exit 1; }
grep -q "stays tcp (no RDMA request from the client in time)" "$log" || { echo "no 'stays tcp' in the server's log"; cat "$log"; exit 1; }
echo "ok: exact, on TCP, the engine asleep until its sweep"
