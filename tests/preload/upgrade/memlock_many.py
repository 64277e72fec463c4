"""memlock_many.py HOST PORT N: the client program of integration.memlock_many.pair.

Opens N connections with blocking connect() calls (under the module's before-return rule each is on
RDMA when connect() returns, or stays TCP), keeps every one of them open, then echoes 64 KiB of random
bytes through each in turn and compares every byte; at the end it half-closes each, expects the
server's end, and closes. So all N streams hold their rings at the same time; what the process has
pinned then (VmPin) is printed beside the machine's memory.
"""
import os
import socket
import sys


def echo(sock, index):
    data = os.urandom(64 * 1024)
    sock.sendall(data)
    got = bytearray()
    while len(got) < len(data):
        chunk = sock.recv(len(data) - len(got))
        if not chunk:
            print(f"memlock_many: connection {index}: end of stream after {len(got)} bytes", flush=True)
            return False
        got += chunk
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
    socks = [socket.create_connection((host, port)) for _ in range(n)]
    for index, sock in enumerate(socks):
        if not echo(sock, index):
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
    print(f"memlock_many: {n} connections open at once, 64 KiB echoed through each, every byte equal", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
