"""same_semantics.py ADDRESS PORT SHIM_LOG: a connection's behaviour at its ends, step by step.

Runs the same steps on fresh connections to itself on ADDRESS:PORT (both ends in this process) and
prints one line per step: what each call returned, the errno it failed with, the poll events it
reported, and the SIGPIPEs raised meanwhile. integration.semantics_same.loop runs it once on a port the
rules put on RDMA and once on a port they keep on TCP: the two transcripts must be equal. With
SHIM_LOG (not "-"), every connection waits, before its steps, until the log shows both ends upgraded.
"""
import errno
import hashlib
import os
import select
import signal
import socket
import sys
import time

SETTLE = 0.5  # for the peer's end, release or reset to arrive
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB
EVENTS = select.POLLIN | select.POLLOUT | select.POLLRDHUP | select.POLLPRI
NAMES = [(select.POLLIN, "IN"), (select.POLLOUT, "OUT"), (select.POLLERR, "ERR"), (select.POLLHUP, "HUP"),
         (select.POLLRDHUP, "RDHUP"), (select.POLLNVAL, "NVAL"), (select.POLLPRI, "PRI")]
sigpipes = 0


def on_sigpipe(_signum, _frame):
    global sigpipes
    sigpipes += 1


def events(sock):
    p = select.poll()
    p.register(sock, EVENTS)
    got = p.poll(0)
    mask = got[0][1] if got else 0
    return "|".join(name for bit, name in NAMES if mask & bit) or "-"


def call(what, fn):
    before = sigpipes
    try:
        result = fn()
        if isinstance(result, bytes):
            result = "bytes %r" % result
        out = "%s = %s" % (what, result)
    except OSError as e:
        out = "%s: %s" % (what, errno.errorcode.get(e.errno, e.errno))
    if sigpipes != before:
        out += " (SIGPIPE x%d)" % (sigpipes - before)
    print(out, flush=True)


def read_exactly(sock, n):
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def wait_readable(sock, ms):
    p = select.poll()
    p.register(sock, select.POLLIN)
    return "IN" if p.poll(ms) else "nothing"


def upgraded_lines(log):
    try:
        with open(log) as f:
            return sum(1 for line in f if "upgraded to rdma" in line)
    except FileNotFoundError:
        return 0


def pair(address, port, log):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(1)
    before = upgraded_lines(log) if log != "-" else 0
    client = socket.create_connection((address, port))
    server, _ = listener.accept()
    listener.close()
    wait_upgraded(log, before)
    return client, server


def wait_upgraded(log, before):
    if log == "-":
        return
    deadline = time.monotonic() + 20
    while upgraded_lines(log) < before + 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the connection was not upgraded on both ends")
        time.sleep(0.05)


def child_ends_with_exit(address, port, log, close_first):
    """A forked child connects, writes 1 MiB and ends with os._exit (after close() when close_first):
    the kernel delivers the bytes and the end after any way out, so the server reads them all."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(1)
    before = upgraded_lines(log) if log != "-" else 0
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            c = socket.create_connection((address, port))
            wait_upgraded(log, before)
            c.sendall(PAYLOAD)
            if close_first:
                c.close()
            status = 0
        finally:
            os._exit(status)
    s, _ = listener.accept()
    listener.close()
    got = hashlib.sha256()
    n = 0
    end = "the end"
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            n += len(chunk)
            got.update(chunk)
    except OSError as e:
        end = errno.errorcode.get(e.errno, e.errno)
    _, status = os.waitpid(pid, 0)
    same = "the bytes sent" if got.digest() == hashlib.sha256(PAYLOAD).digest() else "other bytes"
    print("server read %d bytes, %s, then %s; child exit status %d" % (n, same, end, os.waitstatus_to_exitcode(status)),
          flush=True)
    s.close()


def main(address, port, log):
    signal.signal(signal.SIGPIPE, on_sigpipe)
    c, s = pair(address, port, log)
    print("-- both ends shut their sending side", flush=True)
    call("client send", lambda: c.send(b"hello"))
    time.sleep(SETTLE)
    call("server recv", lambda: s.recv(100))
    call("client poll", lambda: events(c))
    call("server shutdown SHUT_WR", lambda: s.shutdown(socket.SHUT_WR))
    time.sleep(SETTLE)
    call("client poll", lambda: events(c))
    call("client recv", lambda: c.recv(100))
    call("server poll", lambda: events(s))
    call("client shutdown SHUT_WR", lambda: c.shutdown(socket.SHUT_WR))
    time.sleep(SETTLE)
    call("client poll", lambda: events(c))
    call("server poll", lambda: events(s))
    call("server recv", lambda: s.recv(100))
    call("client send", lambda: c.send(b"x"))
    call("client send MSG_NOSIGNAL", lambda: c.send(b"x", socket.MSG_NOSIGNAL))
    c.close()
    s.close()

    c, s = pair(address, port, log)
    print("-- the peer closes, then we write", flush=True)
    call("server send", lambda: s.send(b"bye"))
    call("server close", s.close)
    time.sleep(SETTLE)
    call("client poll", lambda: events(c))
    call("client recv", lambda: c.recv(100))
    call("client recv", lambda: c.recv(100))
    call("client send", lambda: c.send(b"after"))
    time.sleep(SETTLE)
    call("client poll", lambda: events(c))
    call("client SO_ERROR", lambda: c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    call("client poll", lambda: events(c))
    call("client send", lambda: c.send(b"again"))
    call("client send", lambda: c.send(b"again"))
    call("client recv", lambda: c.recv(100))
    call("client poll", lambda: events(c))
    c.close()

    c, s = pair(address, port, log)
    print("-- the peer closes, we write twice", flush=True)
    call("server close", s.close)
    time.sleep(SETTLE)
    call("client send", lambda: c.send(b"one"))
    time.sleep(SETTLE)
    call("client send", lambda: c.send(b"two"))
    call("client poll", lambda: events(c))
    call("client SO_ERROR", lambda: c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    c.close()

    c, s = pair(address, port, log)
    print("-- shutdown of the receiving side", flush=True)
    call("client shutdown SHUT_RD", lambda: c.shutdown(socket.SHUT_RD))
    call("client poll", lambda: events(c))
    c.setblocking(False)
    call("client recv", lambda: c.recv(100))
    call("server send", lambda: s.send(b"late"))
    time.sleep(SETTLE)
    call("client recv", lambda: c.recv(100))
    call("client recv", lambda: c.recv(100))
    call("client send", lambda: c.send(b"still"))
    time.sleep(SETTLE)
    call("server recv", lambda: s.recv(100))
    call("client shutdown SHUT_WR", lambda: c.shutdown(socket.SHUT_WR))
    call("client poll", lambda: events(c))
    call("client shutdown 7", lambda: c.shutdown(7))
    c.close()
    s.close()

    c, s = pair(address, port, log)
    print("-- both sides at once", flush=True)
    call("client shutdown SHUT_RDWR", lambda: c.shutdown(socket.SHUT_RDWR))
    call("client poll", lambda: events(c))
    time.sleep(SETTLE)
    call("server poll", lambda: events(s))
    call("server recv", lambda: s.recv(100))
    call("server send", lambda: s.send(b"z"))
    c.close()
    s.close()

    c, s = pair(address, port, log)
    print("-- TCP_CORK and MSG_MORE", flush=True)
    request = b"GET / HTTP/1.1\r\n" + bytes(range(256)) * 12
    call("client cork", lambda: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1))
    call("client TCP_CORK", lambda: c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK))
    call("client send corked", lambda: c.send(request[:17]))
    call("client send corked", lambda: c.send(request[17:]))
    call("client uncork", lambda: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0))
    call("client TCP_CORK", lambda: c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK))
    call("client TCP_CORK, 2 bytes", lambda: c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 2))
    call("client cork, 2 bytes", lambda: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, b"\x01\x00"))
    call("server reads", lambda: read_exactly(s, len(request)) == request)
    # Corked and never uncorked: the kernel sends it after 200 ms; nothing is lost waiting.
    call("client cork", lambda: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1))
    call("client send corked", lambda: c.send(b"ping"))
    call("server poll 2 s", lambda: wait_readable(s, 2000))
    call("server recv", lambda: s.recv(100))
    call("client send corked", lambda: c.send(b"pong?"))
    call("client TCP_NODELAY", lambda: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1))
    call("server reads", lambda: read_exactly(s, 5))
    call("client uncork", lambda: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0))
    # Small pieces that say more follows (less than a ring: nobody reads meanwhile), then the close:
    # every byte, then the end.
    pieces = [PAYLOAD[i:i + 3000] for i in range(0, 60000, 3000)]
    call("client sends MSG_MORE", lambda: sum(c.send(piece, socket.MSG_MORE) for piece in pieces))
    call("client close", c.close)
    call("server reads", lambda: read_exactly(s, 60000) == PAYLOAD[:60000])
    call("server recv", lambda: s.recv(100))
    s.close()

    print("-- a child writes, then ends with _exit", flush=True)
    child_ends_with_exit(address, port, log, close_first=False)
    print("-- a child writes, closes, then ends with _exit", flush=True)
    child_ends_with_exit(address, port, log, close_first=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
