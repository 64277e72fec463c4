#!/usr/bin/env python3
"""short_clients.py PEER PORT COUNT PARALLEL SIZE [PACE_MS]: COUNT short connections to an echo server,
PARALLEL at a time, as a load tool makes them: each connects, writes SIZE pseudo-random bytes (64 KiB
at a time, PACE_MS apart), shuts its sending side down, reads the echo to its end and checks it byte
for byte (SHA-256). Prints one line with how many came back exact; exits 0 only if all did."""
import hashlib
import random
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def one(peer, port, size, index, pace_ms):
    data = random.Random(index).randbytes(size)  # no repeating pattern: a shift shows
    with socket.create_connection((peer, port), timeout=60) as s:
        try:
            echoed = exchange(s, data, pace_ms)
        except OSError as e:  # the local port names the connection in the module's logs
            raise OSError("%s (local port %d)" % (e, s.getsockname()[1])) from e
    return hashlib.sha256(echoed).digest() == hashlib.sha256(data).digest(), len(echoed)


def exchange(s, data, pace_ms):
    """Writes data (64 KiB at a time, pace_ms apart), shuts the sending side down, returns the echo."""
    sent = 0
    got = []
    view = memoryview(data)
    # Write and read in turn: an echo of a large write would fill both directions' buffers.
    s.setblocking(True)
    while sent < len(data):
        sent += s.send(view[sent:sent + 65536])
        s.settimeout(0)
        try:
            while True:
                piece = s.recv(65536)
                if not piece:
                    break
                got.append(piece)
        except (BlockingIOError, socket.timeout):
            pass
        s.settimeout(60)
        if pace_ms and sent < len(data):
            time.sleep(pace_ms / 1000.0)
    s.shutdown(socket.SHUT_WR)
    while True:
        piece = s.recv(65536)
        if not piece:
            break
        got.append(piece)
    return b"".join(got)


def main():
    peer, port, count, parallel, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    pace_ms = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    exact = 0
    wrong = []
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for i, result in enumerate(pool.map(lambda i: _safe(peer, port, size, i, pace_ms), range(count))):
            ok, detail = result
            if ok:
                exact += 1
            else:
                wrong.append("%d: %s" % (i, detail))
    print("short-clients %d: %d of %d connections echoed exact%s" % (port, exact, count, "; " + ", ".join(wrong[:5]) if wrong else ""))
    sys.exit(0 if exact == count else 1)


def _safe(peer, port, size, index, pace_ms):
    try:
        ok, n = one(peer, port, size, index, pace_ms)
        return ok, "%d bytes, not the ones sent" % n
    except OSError as e:
        return False, str(e)


if __name__ == "__main__":
    main()
