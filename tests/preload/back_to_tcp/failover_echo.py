#!/usr/bin/env python3
"""failover_echo.py: connections that must outlive their RDMA path, both ends event loops.

  server PORT [PORT...]
      An epoll event loop (selectors) that echoes every connection on each port, byte for byte, and
      ends its sending side after the client's end. Prints "listening" on standard error.
  client HOST SECONDS CUT_AFTER MARKS SPEC [SPEC...] [--expect-reset]
      SPEC is PORT:BULK:IDLE[:THREADED]. BULK connections write a pattern for SECONDS (and at least
      15 s after the fault is over, so that their returns to RDMA come while they write, however late
      a slow guest's failover) while reading its echo, then end their sending side and read the rest
      up to the end. IDLE connections
      exchange 1000 bytes, sit idle until every file of MARKS (comma-separated) exists (the fault is
      over), exchange 100 000 more and end. THREADED connections are bulk ones on blocking sockets,
      with a writer thread and a reader thread each (ThreadedConn). CUT_AFTER seconds after every
      connection is up, the file $T2R_WORK/cut is made: the guests' fault agents (fault_agent.sh)
      act on it.
      Every byte of every echo is checked in order, and the count at the end. Prints one line per
      connection and exits 0 when each got back exactly what it sent, then a clean end; with
      --expect-reset, when each connection instead ended with an error (never a clean end short of
      what it sent, never a wrong byte): its peer was killed.
"""
import os
import random
import selectors
import socket
import struct
import sys
import threading
import time

BLOCK = 65536
BASE = random.Random(15).randbytes(BLOCK)


def pattern(conn_id, pos, n):
    """Bytes [pos, pos+n) of connection conn_id's stream: 64 KiB blocks, each opening with its own
    number and the connection's, so that a byte out of place, lost or repeated never matches."""
    out = bytearray()
    while n > 0:
        block, offset = divmod(pos, BLOCK)
        head = struct.pack("<QQ", block, conn_id)
        data = head + BASE[16:] if offset < 16 else BASE
        take = min(n, BLOCK - offset)
        out += data[offset:offset + take]
        pos += take
        n -= take
    return bytes(out)


def serve(ports):
    sel = selectors.DefaultSelector()
    for port in ports:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(64)
        srv.setblocking(False)
        sel.register(srv, selectors.EVENT_READ, None)
    print("listening", file=sys.stderr, flush=True)
    state = {}  # socket -> [pending bytearray, peer ended]

    def update(conn):
        pending, ended = state[conn]
        events = (selectors.EVENT_READ if len(pending) < (4 << 20) and not ended else 0) | \
                 (selectors.EVENT_WRITE if pending else 0)
        if events:
            sel.modify(conn, events, conn)
        elif ended:
            sel.unregister(conn)
            del state[conn]
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError as e:  # reset meanwhile: the client's byte check reports what was lost
                print(f"server: a connection failed at its end: {e}", flush=True)
            conn.close()

    while True:
        for key, mask in sel.select():
            if key.data is None:
                conn, _ = key.fileobj.accept()
                conn.setblocking(False)
                state[conn] = [bytearray(), False]
                sel.register(conn, selectors.EVENT_READ, conn)
                continue
            conn = key.data
            try:
                if mask & selectors.EVENT_READ:
                    data = conn.recv(1 << 20)
                    if data:
                        state[conn][0] += data
                    else:
                        state[conn][1] = True
                if mask & selectors.EVENT_WRITE and state[conn][0]:
                    sent = conn.send(state[conn][0])
                    del state[conn][0][:sent]
                update(conn)
            except BlockingIOError:
                pass
            except OSError as e:
                print(f"server: a connection failed: {e}", flush=True)
                sel.unregister(conn)
                conn.close()
                del state[conn]


class Conn:
    def __init__(self, cid, host, port, bulk):
        self.cid, self.port, self.bulk = cid, port, bulk
        self.sock = socket.create_connection((host, port))
        self.local = self.sock.getsockname()[1]  # the shim logs name the connection by it
        self.sock.setblocking(False)
        self.sent = self.got = 0
        self.goal = 1000 if not bulk else None  # idle: what to send now
        self.writing = True
        self.result = None  # "ok", or what went wrong

    def kind(self):
        return "bulk" if self.bulk else "idle"

    def fail(self, what):
        if self.result is None:
            self.result = what

    def write(self, until):
        if self.bulk and time.monotonic() >= until:
            self.goal = self.sent
        n = (256 << 10) if self.goal is None else min(256 << 10, self.goal - self.sent)
        if n > 0:
            self.sent += self.sock.send(pattern(self.cid, self.sent, n))
        if self.goal is not None and self.sent == self.goal and (self.bulk or self.goal > 1000):
            self.sock.shutdown(socket.SHUT_WR)
            self.writing = False

    def read(self):
        data = self.sock.recv(1 << 20)
        if not data:
            if self.writing or self.got != self.sent:
                self.fail(f"a clean end after {self.got} of {self.sent} bytes")
            else:
                self.result = self.result or "ok"
            return
        if data != pattern(self.cid, self.got, len(data)):
            expected = pattern(self.cid, self.got, len(data))
            bad = next(i for i in range(len(data)) if data[i] != expected[i])
            self.fail(f"byte {self.got + bad} is not the one sent")
        self.got += len(data)
        if self.got > self.sent:
            self.fail(f"{self.got} bytes back of {self.sent} sent")


class ThreadedConn:
    """A connection on a blocking socket, as a thread-per-direction program uses one: a writer thread
    sends the pattern in bursts for SECONDS, then ends its sending side; a reader thread sits in a
    blocking recv() for the echo the whole time, so that its call is inside the kernel when the
    connection changes path (a return to RDMA must not take the switch's bytes from under it)."""

    def __init__(self, cid, host, port):
        self.cid, self.port = cid, port
        self.sock = socket.create_connection((host, port))
        self.local = self.sock.getsockname()[1]  # the shim logs name the connection by it
        self.sent = self.got = 0
        self.result = None
        self.also = []  # what went wrong after the first failure

    def kind(self):
        return "threaded"

    def fail(self, what):
        # The moment and the thread, to set beside the shim logs' times: which side failed first.
        now = time.time()
        what += f" ({threading.current_thread().name} at {time.strftime('%H:%M:%S', time.localtime(now))}.{int(now * 1000) % 1000:03d})"
        if self.result is None:
            self.result = what
        else:
            self.also.append(what)

    def start(self, until):
        def write():
            try:
                while time.monotonic() < until:
                    for _ in range(16):
                        self.sock.sendall(pattern(self.cid, self.sent, 64 << 10))
                        self.sent += 64 << 10
                    # The echo drains and the reader waits inside recv(); then a call that moves
                    # nothing (it may be the one that finds a return due) and a pause longer than a
                    # switch, with no byte on the way: nothing but a switch's could reach that recv().
                    time.sleep(0.5)
                    self.sock.send(b"")
                    time.sleep(2)
                self.sock.shutdown(socket.SHUT_WR)
            except OSError as e:
                self.fail(f"write: {type(e).__name__} after {self.sent} bytes sent")

        def read():
            try:
                while True:
                    data = self.sock.recv(1 << 20)
                    if not data:
                        break
                    if data != pattern(self.cid, self.got, len(data)):
                        self.fail(f"byte {self.got} onwards is not what was sent")
                    self.got += len(data)
                if self.got != self.sent:
                    self.fail(f"a clean end after {self.got} of {self.sent} bytes")
            except OSError as e:
                self.fail(f"reset after {self.got} of {self.sent} bytes" if isinstance(e, ConnectionResetError)
                          else f"error {type(e).__name__} after {self.got} of {self.sent} bytes")
            self.result = self.result or "ok"

        self.threads = [threading.Thread(target=write, name="writer"), threading.Thread(target=read, name="reader")]
        for t in self.threads:
            t.start()

    def join(self, deadline):
        for t in self.threads:
            t.join(max(0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.fail(f"stuck: {self.got} of {self.sent} bytes back")
        self.sock.close()


def run_client(host, seconds, cut_after, marks, specs, expect_reset):
    conns = []
    threaded = []
    for port, bulk, idle, *more in specs:
        for is_bulk in [True] * bulk + [False] * idle:
            conns.append(Conn(len(conns) + len(threaded) + 1, host, port, is_bulk))
        for _ in range(more[0] if more else 0):
            threaded.append(ThreadedConn(len(conns) + len(threaded) + 1, host, port))
    for t in threaded:
        t.start(time.monotonic() + seconds)
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
    start = time.monotonic()
    until, cut_at, give_up = start + seconds, start + cut_after, start + seconds + 150
    cut = False
    marks_seen_at = None
    while any(c.result is None for c in conns):
        now = time.monotonic()
        if now > give_up:
            for c in conns:
                c.fail(f"stuck: {c.got} of {c.sent} bytes back")
            break
        if not cut and now >= cut_at:
            open(os.path.join(os.environ["T2R_WORK"], "cut"), "w").close()
            cut = True
        if marks_seen_at is None and cut and all(os.path.exists(m) for m in marks):
            marks_seen_at = now
            until = max(until, now + 15)
            give_up = max(give_up, until + 150)
        for c in conns:
            # An idle connection wakes 2 s after the fault is over, with 100 000 bytes more.
            if not c.bulk and c.goal == 1000 and c.got == 1000 and marks_seen_at and now > marks_seen_at + 2:
                c.goal = 101000
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.writing and (c.goal is None or c.sent < c.goal) else 0)
            if c.result is None and sel.get_key(c.sock).events != want:
                sel.modify(c.sock, want, c)
        for key, mask in sel.select(timeout=0.2):
            c = key.data
            try:
                if mask & selectors.EVENT_WRITE and c.writing:
                    c.write(until)
                if mask & selectors.EVENT_READ:
                    c.read()
            except BlockingIOError:
                pass
            except OSError as e:
                c.fail(f"reset after {c.got} of {c.sent} bytes" if isinstance(e, ConnectionResetError)
                       else f"error {type(e).__name__} after {c.got} of {c.sent} bytes")
            if c.result is not None:
                sel.unregister(c.sock)
                c.sock.close()
    for t in threaded:
        t.join(give_up)
    ok = True
    for c in conns + threaded:
        print(f"client: connection {c.cid} (port {c.port} from {c.local}, {c.kind()}): {c.result}; {c.sent} bytes sent, "
              f"{c.got} back" + "".join(f"; then {what}" for what in getattr(c, "also", [])), flush=True)
        if expect_reset:
            ok &= c.result.startswith("reset") or c.result.startswith("error")
        else:
            ok &= c.result == "ok"
    return 0 if ok else 1


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "server":
        serve([int(p) for p in sys.argv[2:]])
    args = [a for a in sys.argv[1:] if a != "--expect-reset"]
    if len(args) >= 6 and args[0] == "client":
        specs = [tuple(int(x) for x in s.split(":")) for s in args[5:]]
        sys.exit(run_client(args[1], float(args[2]), float(args[3]), args[4].split(","), specs,
                            "--expect-reset" in sys.argv))
    print(__doc__, file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
