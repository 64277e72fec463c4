#!/usr/bin/env python3
"""fault_reader.py PORT: accepts one connection and reads it until its end or an error, checking that
every byte is a zero (the sender sends /dev/zero). Prints "listening" on standard error first, and at
the end one line on standard output: "end: eof N", "end: reset N" or "end: error NAME N" (N bytes read).
Exits 0 only when the stream did not end cleanly (a reset or another error) after more than nothing:
the RDMA path was broken under the transfer, and the application must be told, never given a clean
end after lost bytes (issue 13). Exit 1 on a clean end, 2 on a byte that is not a zero."""
import socket
import sys

port = int(sys.argv[1])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(1)
print("listening", file=sys.stderr, flush=True)
conn, _ = srv.accept()
total = 0
try:
    while True:
        data = conn.recv(1 << 20)
        if not data:
            print(f"end: eof {total}", flush=True)
            sys.exit(1)
        if data.count(0) != len(data):
            print(f"end: a byte that was never sent, near {total}", flush=True)
            sys.exit(2)
        total += len(data)
except ConnectionResetError:
    print(f"end: reset {total}", flush=True)
except OSError as e:
    print(f"end: error {type(e).__name__} {total}", flush=True)
sys.exit(0 if total > 0 else 1)
