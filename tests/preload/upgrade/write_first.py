"""write_first.py HOST PORT N BYTES LOG: messages larger than both rings, written whole before reading.

Against an echo server that answers while it reads and stops reading while its answer drains
(stress_echo.py's asyncio server), N connections one after the other: each echoes 1 KiB, waits until
the module's log LOG says it is on RDMA (one more "upgraded to rdma" line), then sends BYTES random
bytes with sendall() before it reads any of the echo, then compares the echo byte for byte and reads
the end. Kernel TCP's buffers take a few MiB that nobody reads; rings that cannot grow take 64 KiB
each way, so this passes only if the module moves the peer's bytes out of a full ring while its
application waits to write (transport/stream_spill.cpp). The socket has a timeout (Python then
waits in poll() for POLLOUT between its sends): a wait for each other shows as a timeout, not a hang.
Exits non-zero at the first connection that fails, saying where.
"""
import hashlib
import os
import socket
import sys
import time

from many_connections import count  # lines of the module's log that say `text`


def receive(sock, nbytes):
    got = bytearray()
    while len(got) < nbytes:
        piece = sock.recv(min(1 << 20, nbytes - len(got)))
        if not piece:
            raise RuntimeError(f"the echo ended after {len(got)} of {nbytes} bytes")
        got += piece
    return bytes(got)


def one_connection(host, port, nbytes, log, upgraded_before, index):
    sock = socket.create_connection((host, port), timeout=60)
    hello = os.urandom(1024)
    sock.sendall(hello)
    if receive(sock, len(hello)) != hello:
        raise RuntimeError("the first echo differs")
    deadline = time.monotonic() + 30
    while count(log, "upgraded to rdma") <= upgraded_before:
        if time.monotonic() > deadline:
            raise RuntimeError("not on RDMA after 30 s")
        time.sleep(0.1)
    data = os.urandom(nbytes)
    start = time.monotonic()
    sock.sendall(data)  # every byte before any of the echo is read
    sent = time.monotonic()
    got = receive(sock, nbytes)
    if got != data:
        at = next(i for i in range(nbytes) if got[i] != data[i])
        raise RuntimeError(f"the echo differs at byte {at}")
    sock.shutdown(socket.SHUT_WR)
    if sock.recv(1):
        raise RuntimeError("bytes after the echo")
    sock.close()
    print(f"write_first: connection {index}: {nbytes} bytes sent in {sent - start:.2f} s, echo exact "
          f"(sha256 {hashlib.sha256(data).hexdigest()[:16]}) after {time.monotonic() - start:.2f} s", flush=True)


def main(argv):
    host, port, n, nbytes, log = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
    for i in range(n):
        try:
            one_connection(host, port, nbytes, log, count(log, "upgraded to rdma"), i)
        except (OSError, RuntimeError) as e:
            print(f"write_first: connection {i} failed: {e!r}", flush=True)
            return 1
    print(f"write_first: {n} connections, {nbytes} bytes each way written whole before reading, every echo exact")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
