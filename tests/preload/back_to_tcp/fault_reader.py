#!/usr/bin/env python3
"""fault_reader.py PORT SIZE SHA256 [RATE]: accepts one connection and reads it to its end, at most RATE
bytes a second (default 6 MiB/s, so that the transfer is still under way when its RDMA path breaks),
hashing what it reads. Prints "listening" on standard error first, and at the end one line on
standard output: "end: eof N SHA" or "end: reset N" or "end: error NAME N" (N bytes read). Exits 0
only on a clean end after exactly SIZE bytes whose SHA-256 is SHA256: every byte arrived, in order,
once, although the RDMA path broke under the transfer."""
import hashlib
import socket
import sys
import time

port, size, want = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rate = float(sys.argv[4]) if len(sys.argv) > 4 else 6 * 1024 * 1024
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(1)
print("listening", file=sys.stderr, flush=True)
conn, _ = srv.accept()
digest = hashlib.sha256()
total = 0
start = time.monotonic()
try:
    while True:
        ahead = total / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
        data = conn.recv(256 * 1024)
        if not data:
            break
        digest.update(data)
        total += len(data)
except ConnectionResetError:
    print(f"end: reset {total}", flush=True)
    sys.exit(1)
except OSError as e:
    print(f"end: error {type(e).__name__} {total}", flush=True)
    sys.exit(1)
got = digest.hexdigest()
print(f"end: eof {total} {got}", flush=True)
sys.exit(0 if total == size and got == want else 1)
