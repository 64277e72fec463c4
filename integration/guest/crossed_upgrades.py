"""crossed_upgrades.py server|client ADDRESS PORT: two connections whose upgrades cross.

Both ends run under the shim with rules that upgrade before the call returns (rules/crossed.yaml).
The client first connects W and asks once (its link to the server is then up). Then it connects X,
then Y, without blocking, and makes its first call on Y: Y's upgrade runs in that call and waits for
the server's answer. The server, single-threaded, accepts X first (it came first) and Y next, so its
accept() of X must not wait for X's request: the client asks for Y first, and asks for X only once Y
is answered. Each connection then carries ROUNDS request/response pairs of random sizes, checked
byte for byte (the server echoes with a prefix naming the connection), and the client prints how long
the crossed connections took to become usable. The test (crossed-upgrades.sh) checks that both ends
logged all three connections on RDMA, and the server the crossing.
"""
import hashlib
import os
import random
import select
import socket
import sys
import time

ROUNDS = 50
NAMES = (b"X", b"Y")


def recv_exactly(sock, n):
    parts = []
    while n > 0:
        part = sock.recv(min(n, 65536))
        if not part:
            raise RuntimeError("the peer ended the stream early")
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def serve(address, port):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(8)
    print("crossed: listening", flush=True)
    first = listener.accept()[0]
    serve_requests([first], 1)
    conns = [listener.accept()[0] for _ in NAMES]
    serve_requests(conns, ROUNDS * len(conns))
    for conn in conns + [first]:
        conn.close()


def serve_requests(conns, count):
    for _ in range(count):
        # Whichever asks: the client's order is not the accept's.
        for conn in select.select(conns, [], [])[0][:1]:
            head = recv_exactly(conn, 5)
            size = int.from_bytes(head[1:], "big")
            body = recv_exactly(conn, size)
            conn.sendall(head[:1] + hashlib.sha256(body).digest() + body)


def ask(sock, name, rng):
    body = rng.randbytes(rng.randrange(1, 70000))
    sock.sendall(name + len(body).to_bytes(4, "big") + body)
    reply = recv_exactly(sock, 1 + 32 + len(body))
    if reply[:1] != name or reply[1:33] != hashlib.sha256(body).digest() or reply[33:] != body:
        raise RuntimeError("connection %s: the reply is not the request's echo" % name.decode())


def client(address, port):
    rng = random.Random(int.from_bytes(os.urandom(8), "big"))
    first = socket.create_connection((address, port))
    ask(first, b"W", rng)
    socks = []
    for _ in NAMES:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((address, port))
        socks.append(s)
    time.sleep(0.2)  # both in the server's accept queue, X first; no call of ours has touched them
    x, y = socks
    started = time.monotonic()
    # Y first: its upgrade runs in this call and waits for the server, which accepts X first.
    y.setblocking(True)
    ask(y, b"Y", rng)
    x.setblocking(True)
    ask(x, b"X", rng)
    print("crossed: both connections answered after %.2f s" % (time.monotonic() - started), flush=True)
    for _ in range(ROUNDS - 1):
        ask(x, b"X", rng)
        ask(y, b"Y", rng)
    for s in socks + [first]:
        s.close()
    print("crossed: %d exact round trips on each connection" % ROUNDS, flush=True)


if __name__ == "__main__":
    role, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    (serve if role == "server" else client)(address, port)
