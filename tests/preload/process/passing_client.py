"""passing_client.py HOST PORT MODE SIZE: one connection to passing_echo.py. MODE "greeting": read the
worker's "ready\n", then send SIZE random bytes while reading their echo; the echo must be exact.
MODE "eager": send at once, before the greeting; the echo (after the greeting) must be exact, or the
connection reset: never a clean end with bytes missing, never a byte the worker did not send.
One thread, reading before it writes whenever the socket is readable: a reset reaches the kernel's
first call after it, and a clean end can never be taken for one.
Prints "client: MODE exact" or "client: MODE reset"; exits 1 on anything else.
"""
import os
import select
import socket
import sys

host, port, mode, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
data = os.urandom(size)
want = b"ready\n" + data
conn = socket.create_connection((host, port))
conn.setblocking(False)
got = bytearray()
sent = 0
ended_ours = False


def finish(outcome, ok):
    print(f"client: {mode} {outcome}")
    sys.exit(0 if ok else 1)


try:
    while True:
        may_send = sent < size and (mode == "eager" or len(got) >= 6)
        readable, writable, _ = select.select([conn], [conn] if may_send else [], [], 60)
        if not readable and not writable:
            finish(f"stalled after {len(got)} bytes read and {sent} sent", False)
        if readable:
            try:
                chunk = conn.recv(65536)
            except BlockingIOError:
                chunk = None
            if chunk is None:
                pass
            elif not chunk:
                break
            else:
                got += chunk
                if bytes(got) != want[:len(got)]:
                    finish(f"read a byte the worker did not send, at {len(got)}", False)
                continue  # read first while there is something to read
        if writable:
            try:
                sent += conn.send(data[sent:sent + 65536])
            except BlockingIOError:
                continue
            if sent == size and not ended_ours:
                conn.shutdown(socket.SHUT_WR)
                ended_ours = True
except (ConnectionResetError, BrokenPipeError) as e:
    finish(f"reset ({e.strerror}) after {len(got)} bytes read", mode == "eager")
if bytes(got) != want:
    finish(f"clean end after {len(got)} of {len(want)} bytes", False)
finish("exact", True)
