"""memcache_check.py HOST PORT CONNECTIONS ROUNDS: many clients of a memcached at once.

Opens CONNECTIONS connections to memcached's text protocol at HOST:PORT, all held open together, and in
each of ROUNDS rounds sets a key of its own on every connection to a random value (100 to 4000 bytes)
and reads every key back on another connection than the one that set it. Exits non-zero if any value
comes back different or any reply is not memcached's; prints "N values read back equal".
"""
import os
import random
import socket
import sys


def reply_line(sock, buffer):
    while b"\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("memcached ended a connection")
        buffer += chunk
    line, _, rest = buffer.partition(b"\r\n")
    return line, rest


def get(sock, key):
    sock.sendall(b"get %s\r\n" % key)
    line, rest = reply_line(sock, b"")
    parts = line.split()
    if len(parts) != 4 or parts[0] != b"VALUE" or parts[1] != key:
        raise RuntimeError("unexpected reply to get: %r" % line)
    length = int(parts[3])
    while len(rest) < length + len(b"\r\nEND\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("memcached ended a connection")
        rest += chunk
    if rest[length:] != b"\r\nEND\r\n":
        raise RuntimeError("unexpected end of a get reply")
    return rest[:length]


def main(host, port, connections, rounds):
    socks = [socket.create_connection((host, port)) for _ in range(connections)]
    checked = 0
    for r in range(rounds):
        values = {}
        for i, sock in enumerate(socks):
            key = b"k%d-%d" % (i, r)
            value = os.urandom(random.randint(100, 4000))
            sock.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
            line, _ = reply_line(sock, b"")
            if line != b"STORED":
                raise RuntimeError("unexpected reply to set: %r" % line)
            values[key] = value
        for i, sock in enumerate(socks):
            key = b"k%d-%d" % ((i + 1) % connections, r)
            if get(sock, key) != values[key]:
                raise RuntimeError("round %d: %s came back different" % (r, key.decode()))
            checked += 1
    for sock in socks:
        sock.close()
    print("%d values read back equal" % checked)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
