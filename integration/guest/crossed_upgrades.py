"""crossed_upgrades.py server|client|plain ADDRESS PORT: two connections whose upgrades cross, then a
plain client's.

Both ends run under the shim with rules that upgrade before the call returns (rules/crossed.yaml).
The client first connects W and asks once (its link to the server is then up, and the server has
heard from it). Then it connects X, then Y, without blocking, and makes its first call on Y: Y's
upgrade runs in that call and waits for the server's answer. The server, single-threaded, accepts X
first (it came first) and Y next, so its accept() of X must not wait for X's request: the client
asks for Y first, and asks for X only once Y is answered. Each connection then carries ROUNDS request/response pairs of
random sizes, checked byte for byte (the server echoes with a prefix naming the connection), and the
client prints how long the connects took to become usable. The test (crossed-upgrades.sh) checks that
both ends logged both connections on RDMA.

Then `plain` (run without the shim) connects once more, from PLAIN_SOURCE (an address of the guest's
that the server has heard nothing from; loopback would be kept on TCP by the built-in rule), and
asks once: the server's accept() must not wait the upgrade timeout for the
RDMA request a plain client never sends. It fails when the answer
took longer than half the rules' upgrade timeout (PLAIN_LIMIT seconds).
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
PLAIN_LIMIT = 4.0  # rules/crossed.yaml's upgrade_timeout is 8 s
PLAIN_SOURCE = "10.77.0.9"  # crossed-upgrades.sh adds it to the guest's device


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
    listener.bind(("0.0.0.0", port))
    listener.listen(8)
    print("crossed: listening", flush=True)
    first = listener.accept()[0]
    serve_requests([first], 1)
    conns = [listener.accept()[0] for _ in NAMES]
    serve_requests(conns, ROUNDS * len(conns))
    for conn in conns + [first]:
        conn.close()
    plain = listener.accept()[0]
    serve_requests([plain], 1)
    plain.close()


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


def plain(address, port):
    rng = random.Random(int.from_bytes(os.urandom(8), "big"))
    started = time.monotonic()
    with socket.create_connection((address, port), source_address=(PLAIN_SOURCE, 0)) as s:
        ask(s, b"P", rng)
    took = time.monotonic() - started
    print("crossed: a plain client's request answered after %.2f s" % took, flush=True)
    if took > PLAIN_LIMIT:
        raise RuntimeError("the server's accept() waited for an RDMA request a plain client never sends")


if __name__ == "__main__":
    role, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    {"server": serve, "client": client, "plain": plain}[role](address, port)
