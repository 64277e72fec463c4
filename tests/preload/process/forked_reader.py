#!/usr/bin/env python3
"""forked_reader.py server PORT... | client HOST PORT CASE SIZE OUT: rsync's shape, the receiving side
forked: after a greeting on the connection the client forks; its child only reads (SIZE bytes from the
server, then the server's trailer, then the end) while its parent only writes (a stream of its own,
then shutdown(SHUT_WR)). The server checks the parent's bytes, says what it got in the trailer, and
the child checks everything it read. CASE:
  plain       nothing more: the child reads through its parent's relay to the end;
  child-writes  the child, halfway through, writes one line (after the parent's last byte), which
              claims the connection whole: it moves back to TCP under the child's reads;
  parent-exits  the child reads 1 MiB (through the relay), then sleeps while the parent shuts its side
              down and exits: the parent hands the connection to the child as it leaves, with
              the bytes its relay queued.
The child writes 'ok ...' or 'FAIL ...' into OUT (the parent of case parent-exits is gone by then)."""
import hashlib
import os
import socket
import sys
import threading
import time

PARENT_BYTES = 3 * 1024 * 1024
CHILD_LINE = b"CHILD WROTE THIS\n"


def block(seed, i):
    return hashlib.sha256(b"%s:%d" % (seed, i)).digest() * 128  # 4 KiB


def stream(seed, size):
    """The deterministic bytes of one side, in 4 KiB blocks."""
    sent = 0
    i = 0
    while sent < size:
        b = block(seed, i)[: size - sent]
        yield b
        sent += len(b)
        i += 1


def digest(seed, size):
    h = hashlib.sha256()
    for b in stream(seed, size):
        h.update(b)
    return h.hexdigest()


def serve_one(conn):
    f = conn.makefile("rb")
    case, size = f.readline().split()
    size = int(size)
    got = hashlib.sha256()
    count = [0]

    def drain():
        while True:
            b = f.read1(65536)
            if not b:
                return
            got.update(b)
            count[0] += len(b)

    reader = threading.Thread(target=drain)
    reader.start()
    for b in stream(b"server", size):
        conn.sendall(b)
    reader.join()
    expected = hashlib.sha256()
    for b in stream(b"parent", PARENT_BYTES):
        expected.update(b)
    if case == b"child-writes":
        expected.update(CHILD_LINE)
    verdict = "ok" if got.hexdigest() == expected.hexdigest() else "FAIL"
    conn.sendall(b"%s %d\n" % (verdict.encode(), count[0]))
    print(f"forked-reader server: {case.decode()}: {count[0]} bytes from the client, {verdict}", flush=True)
    conn.close()


def server(ports):
    listeners = []
    for port in ports:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        s.listen(4)
        listeners.append(s)
    threads = []
    for s in listeners:
        conn, _ = s.accept()
        t = threading.Thread(target=serve_one, args=(conn,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def child(conn, case, size, out, go_write, wrote):
    """Reads everything, checks it; in child-writes writes its line halfway (after the parent's bytes);
    in parent-exits tells the parent after 1 MiB, then sleeps (the relay's queue fills)."""
    h = hashlib.sha256()
    want = digest(b"server", size)
    total = 0
    tail = b""
    wrote_line = False
    while True:
        b = conn.recv(65536)
        if not b:
            break
        take = b[: max(0, size - total)]
        h.update(take)
        tail += b[len(take):]
        total += len(take)
        if case == "child-writes" and not wrote_line and total >= size // 2:
            os.read(go_write, 1)  # the parent wrote its last byte
            conn.sendall(CHILD_LINE)
            os.write(wrote, b"x")
            wrote_line = True
        if case == "parent-exits" and not wrote_line and total >= 1024 * 1024:
            os.write(wrote, b"x")
            wrote_line = True
            time.sleep(1.0)
    ok = total == size and h.hexdigest() == want and tail.startswith(b"ok ")
    with open(out, "w") as f:
        f.write(f"{'ok' if ok else 'FAIL'} {case}: {total} of {size} bytes, digest "
                f"{'equal' if h.hexdigest() == want else 'DIFFERS'}, trailer {tail.strip().decode(errors='replace')}\n")


def client(host, port, case, size, out):
    conn = socket.create_connection((host, port))
    conn.sendall(b"%s %d\n" % (case.encode(), size))
    go_write, tell_go = os.pipe()
    wrote, tell_wrote = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child(conn, case, size, out, go_write, tell_wrote)
        finally:
            os._exit(0)
    for b in stream(b"parent", PARENT_BYTES):
        conn.sendall(b)
    if case == "child-writes":
        os.write(tell_go, b"x")
        os.read(wrote, 1)  # the child's line is out: our end follows it
    conn.shutdown(socket.SHUT_WR)
    if case == "parent-exits":
        os.read(wrote, 1)  # the child reads through the relay
        sys.exit(0)  # exit(): the module hands the connection to the child, which holds it alone
    os.waitpid(pid, 0)
    conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server([int(p) for p in sys.argv[2:]])
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6])
