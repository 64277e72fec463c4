"""passing_client.py HOST PORT MODE SIZE: one connection to passing_echo.py. MODE "greeting": read the
worker's "ready\n", then send SIZE random bytes while reading their echo; the echo must be exact.
MODE "eager": send at once, before the greeting; the echo (after the greeting) must be exact, or the
connection reset: never a clean end with bytes missing, never a byte the worker did not send.
Prints "client: MODE exact" or "client: MODE reset"; exits 1 on anything else.
"""
import os
import socket
import sys
import threading

host, port, mode, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
data = os.urandom(size)
conn = socket.create_connection((host, port))


def send_all():
    try:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the reader sees the reset too


def read_exactly(n):
    got = bytearray()
    while len(got) < n:
        chunk = conn.recv(min(65536, n - len(got)))
        if not chunk:
            break
        got += chunk
    return bytes(got)


try:
    sender = threading.Thread(target=send_all)
    if mode == "eager":
        sender.start()
    greeting = read_exactly(6)
    if greeting != b"ready\n":
        print(f"client: {mode}: the greeting was {greeting!r}")
        sys.exit(1)
    if mode != "eager":
        sender.start()
    echo = read_exactly(size)
    rest = conn.recv(1)
    sender.join()
except (ConnectionResetError, BrokenPipeError) as e:
    print(f"client: {mode} reset ({e.strerror})")
    sys.exit(0 if mode == "eager" else 1)
if echo != data or rest != b"":
    print(f"client: {mode}: {len(echo)} of {size} bytes came back, equal: {echo == data[:len(echo)]}, then {rest!r}")
    sys.exit(1)
print(f"client: {mode} exact")
