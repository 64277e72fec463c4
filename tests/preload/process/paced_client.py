"""paced_client.py HOST PORT SECONDS [GREETING]: one connection that, for SECONDS, sends 64 KiB and
reads its echo back, one exchange every 0.05 s (a client that is not always inside recv(), so that
its connection may go back to RDMA: docs/architecture.md, "Back to RDMA"), then ends its side and
reads to the end. With PACED_STOP=FILE in the environment it ends earlier, once FILE exists (the
caller has seen what it waited for, however slow the machine was). With GREETING, the server's first bytes must be that line (the first 64 KiB are
sent before it is read). Prints "client: PORT
exact N" and exits 0 when every byte came back in order; anything else exits 1.
"""
import os
import socket
import sys
import time

host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
greeting = sys.argv[4].encode() + b"\n" if len(sys.argv) > 4 else b""
conn = socket.create_connection((host, port))


def read_exactly(n):
    got = bytearray()
    while len(got) < n:
        data = conn.recv(n - len(got))
        if not data:
            break
        got += data
    return bytes(got)


def fail(what):
    print(f"client: {port}: {what}")
    sys.exit(1)


sent = 0
end = time.monotonic() + seconds
stop = os.environ.get("PACED_STOP")
while time.monotonic() < end and not (stop and os.path.exists(stop)):
    chunk = os.urandom(65536)
    conn.sendall(chunk)
    # The first chunk goes before the greeting is read: it is on its way (on RDMA, unread) when the
    # server's child first uses the connection.
    if sent == 0 and greeting and read_exactly(len(greeting)) != greeting:
        fail("the greeting did not come first")
    echo = read_exactly(len(chunk))
    if echo != chunk:
        fail(f"after {sent} bytes, {len(echo)} came back, equal as far as they go: {echo == chunk[:len(echo)]}")
    sent += len(chunk)
    time.sleep(0.05)
conn.shutdown(socket.SHUT_WR)
if conn.recv(1) != b"":
    fail("bytes after the last echo")
print(f"client: {port} exact {sent}")
