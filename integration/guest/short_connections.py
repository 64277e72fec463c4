"""short_connections.py HOST PORT N BYTES: the client of integration/bench-short.sh.

Short-lived connections one after another, as an HTTP/1.0 client or `curl` in a loop against a keep-alive
less server makes them: connect, send BYTES random bytes, read their echo, close; N times. One more
connection, opened first and held to the end, keeps this process linked to the server process (under the
module: its link, docs/links.md), and measures the round trip on it (1-byte ping-pongs after a warm-up):
without the module kernel TCP's, under it the module's path for an established connection.

Prints one line of key=value pairs: per-connection time p50/p90 (ms), connections per second, the kept
connection's round trip p50 (us). SHORT_KEEP=0: no kept connection (a process that makes one connection
and exits, as `curl` does; rtt_us_p50 is then 0). Exits non-zero if any echo differs or a connection
fails.
"""
import os
import socket
import sys
import time


def exchange(sock, data):
    sock.sendall(data)
    got = bytearray()
    while len(got) < len(data):
        chunk = sock.recv(len(data) - len(got))
        if not chunk:
            raise RuntimeError("the server ended the connection early")
        got += chunk
    if bytes(got) != data:
        raise RuntimeError("the echo differs")


def round_trip_us(sock, count=200):
    times = []
    for _ in range(count):
        t0 = time.monotonic()
        exchange(sock, b"p")
        times.append(time.monotonic() - t0)
    times.sort()
    return times[len(times) // 2] * 1e6


def main(host, port, n, nbytes):
    kept, rtt = None, 0
    if os.environ.get("SHORT_KEEP", "1") != "0":
        kept = socket.create_connection((host, port))
        kept.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The kept connection's own upgrade (a background one moves within its first second) is over
        # before the measure starts.
        exchange(kept, b"w")
        time.sleep(float(os.environ.get("SHORT_WARMUP_S", "2")))
        for _ in range(50):
            exchange(kept, b"w")
        rtt = round_trip_us(kept)
    times = []
    start = time.monotonic()
    for _ in range(n):
        data = os.urandom(nbytes)
        t0 = time.monotonic()
        with socket.create_connection((host, port)) as s:
            exchange(s, data)
        times.append(time.monotonic() - t0)
    elapsed = time.monotonic() - start
    if kept is not None:
        kept.close()
    times.sort()
    print(f"connections={n} bytes_each={nbytes} ms_p50={times[n // 2] * 1e3:.1f} "
          f"ms_p90={times[min(n - 1, int(n * 0.9))] * 1e3:.1f} per_s={n / elapsed:.1f} rtt_us_p50={rtt:.0f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
