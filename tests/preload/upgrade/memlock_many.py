"""memlock_many.py HOST PORT N [BYTES]: the client program of integration.memlock_many.pair.

Opens N connections with blocking connect() calls (under the module's before-return rule each is on
RDMA when connect() returns, or stays TCP), keeps every one of them open, then echoes BYTES (default
64 KiB) of random bytes through each in turn, sent from a thread while this one reads the answer,
and compares every byte; at the end it half-closes each, expects the
server's end, and closes. So all N streams hold their rings at the same time; what the process has
pinned then (VmPin) is printed beside the machine's memory.
"""
import os
import socket
import sys
import threading


def echo(sock, index, nbytes):
    data = os.urandom(nbytes)
    # Sent while the answer is read, as an echo client whose message is larger than the socket
    # buffers must: an application that sends all before it reads waits on kernel TCP too, for
    # larger messages (docs/rules.md, buffer_size).
    sender = threading.Thread(target=sock.sendall, args=(data,))
    sender.start()
    got = bytearray()
    while len(got) < len(data):
        chunk = sock.recv(len(data) - len(got))
        if not chunk:
            print(f"memlock_many: connection {index}: end of stream after {len(got)} bytes", flush=True)
            sender.join()
            return False
        got += chunk
    sender.join()
    if got != data:
        print(f"memlock_many: connection {index}: the echo differs", flush=True)
        return False
    return True


def status_kib(path, name):
    with open(path) as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return -1


def main(argv):
    host, port, n = argv[1], int(argv[2]), int(argv[3])
    nbytes = int(argv[4]) if len(argv) > 4 else 64 * 1024
    socks = [socket.create_connection((host, port)) for _ in range(n)]
    for index, sock in enumerate(socks):
        if not echo(sock, index, nbytes):
            return 1
    pinned = status_kib("/proc/self/status", "VmPin")
    total = status_kib("/proc/meminfo", "MemTotal")
    print(f"memlock_many: all {n} open: VmPin {pinned} KiB, MemTotal {total} KiB", flush=True)
    for index, sock in enumerate(socks):
        sock.shutdown(socket.SHUT_WR)
        if sock.recv(1) != b"":
            print(f"memlock_many: connection {index}: bytes after the echo", flush=True)
            return 1
        sock.close()
    print(f"memlock_many: {n} connections open at once, {nbytes} bytes echoed through each, every byte equal",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
