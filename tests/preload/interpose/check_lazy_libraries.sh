#!/bin/sh
# check_lazy_libraries.sh LIB: libibverbs and librdmacm (and libnl) stay unloaded in a process the
# module reaches until a connection tries RDMA (transport/rdma_libraries.h): not in cat, and not in a
# program whose connection the rules keep on TCP (loopback, the only address a build host has, always
# stays TCP). tests/transport/rdma_libraries_test.cpp checks that the first call opens them.
set -u
lib=$1
runtimes=$(ldd "$lib" | awk '/lib(asan|ubsan|tsan)\.so/ {printf "%s ", $3}')
if [ -n "$runtimes" ]; then lib="$runtimes$lib"; export ASAN_OPTIONS=detect_leaks=0; fi
rdma_libraries='libibverbs|librdmacm|libnl-'

maps=$(LD_PRELOAD="$lib" cat /proc/self/maps)
echo "$maps" | grep -q libtcp2rdma || { echo "the module is not in cat's maps"; exit 1; }
if echo "$maps" | grep -E "$rdma_libraries"; then echo "cat, which made no connection, loaded the above"; exit 1; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$((20000 + $$ % 20000))
cat > "$work/rules.yaml" <<RULES
version: 1
rules:
  - name: loopback-rdma
    match:
      ports: $port
    transport: rdma
    upgrade: before-return
RULES
# One process, both ends: a listener, a client that connects and sends, the accepted end echoing;
# the rule says rdma, the built-in loopback rule before it says tcp.
cat > "$work/echo.py" <<'PY'
import re, socket, sys, threading
port = int(sys.argv[1])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen()
def serve():
    conn, _ = listener.accept()
    while data := conn.recv(65536):
        conn.sendall(data)
    conn.close()
threading.Thread(target=serve, daemon=True).start()
client = socket.create_connection(("127.0.0.1", port))
payload = bytes(range(256)) * 256
client.sendall(payload)
got = b""
while len(got) < len(payload):
    chunk = client.recv(65536)
    if not chunk:
        break
    got += chunk
print("echo", "exact" if got == payload else f"wrong after {len(got)} bytes")
maps = open("/proc/self/maps").read()
print(" ".join(["loaded"] + sorted(set(re.findall(r"(libibverbs|librdmacm|libnl-[a-z0-9-]*)\.so", maps)))))
PY
out=$(TCP2RDMA_RULES="$work/rules.yaml" TCP2RDMA_LOG="$work/log" LD_PRELOAD="$lib" \
      timeout 60 python3 "$work/echo.py" "$port" 2>&1)
echo "$out"
status=0
echo "$out" | grep -qx 'echo exact' || { echo "the bytes did not come back exact"; status=1; }

exit $status
