#!/usr/bin/env python3
"""The Python half of integration.dual_stack.pair.

  server PORT        listens on [::] with IPV6_V6ONLY off (a dual-stack socket: IPv4 clients arrive
                     as ::ffff:a.b.c.d), one thread per connection echoing every byte back until the
                     client's end, then ending its own; says "listening" on stderr.
  client HOST PORT CONNECTIONS BYTES
                     CONNECTIONS threads, each on its own connection to HOST (IPv4 or IPv6, as given)
                     writing BYTES of its own random sequence, ending its sending side and reading the
                     echo back to the end; every byte compared.
"""
import os
import socket
import sys
import threading


def echo(conn, peer):
    total = 0
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)
            total += len(data)
        conn.shutdown(socket.SHUT_WR)
    print(f"python server: echoed {total} bytes to {peer[0]}", file=sys.stderr, flush=True)


def server(port):
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    listener.bind(("::", port))
    listener.listen(128)
    print(f"python server: listening on [::]:{port} (dual-stack)", file=sys.stderr, flush=True)
    while True:
        conn, peer = listener.accept()
        threading.Thread(target=echo, args=(conn, peer), daemon=True).start()


def one_client(host, port, size, failures):
    sent = os.urandom(size)
    try:
        with socket.create_connection((host, port), timeout=120) as conn:
            local = conn.getsockname()
            writer = threading.Thread(target=lambda: (conn.sendall(sent), conn.shutdown(socket.SHUT_WR)))
            writer.start()
            received = bytearray()
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    break
                received += data
            writer.join()
        if received != sent:
            failures.append(f"{local}: echo differs ({len(received)} of {size} bytes)")
    except OSError as e:
        failures.append(f"{host}:{port}: {e}")


def client(host, port, count, size):
    failures = []
    threads = [threading.Thread(target=one_client, args=(host, port, size, failures)) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures:
        print(f"python client: {f}", file=sys.stderr)
    if failures:
        return 1
    print(f"python client: {count} connections to {host}, {size} bytes each way, every echo exact", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "server":
        server(int(sys.argv[2]))
    elif len(sys.argv) == 6 and sys.argv[1] == "client":
        sys.exit(client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
