#!/usr/bin/env python3
"""forked_client.py HOST PORT PARTS RESULT: a client whose connection outlives the process that made it
(a daemon that connects, forks and lets its parent go; a shell's background job). It connects, forks,
and the parent exits at once, its exit hooks run (sys.exit). The child writes PARTS parts of 1 MB of
random bytes, 1.5 s apart, and reads back each one's echo; it writes to RESULT whether every byte came
back (sha256) and how many packets Soft-RoCE sent (rxe's sent_pkts) while the last part went, by which
the caller tells where it went."""
import hashlib
import os
import socket
import sys
import time

COUNTER = "/sys/class/infiniband/" + os.environ.get("T2R_RDMA_DEV", "rxe0") + "/ports/1/hw_counters/sent_pkts"


def sent_pkts():
    with open(COUNTER) as f:
        return int(f.read())


def echo(conn, part):
    conn.sendall(part)
    got = bytearray()
    while len(got) < len(part):
        chunk = conn.recv(len(part) - len(got))
        if not chunk:
            break
        got += chunk
    return hashlib.sha256(got).digest() == hashlib.sha256(part).digest()


def main():
    host, port, parts, result = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for _ in range(300):  # the server may not listen yet
        try:
            conn = socket.create_connection((host, port))
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    else:
        sys.exit("forked_client: nobody listens on %s port %d" % (host, port))
    if os.fork() != 0:
        sys.exit(0)  # the parent lets go by leaving; the child carries the connection on
    time.sleep(0.3)
    ok, last = True, 0
    for i in range(parts):
        if i:
            time.sleep(1.5)
        before = sent_pkts()
        ok = echo(conn, os.urandom(1000000)) and ok
        last = sent_pkts() - before
    conn.shutdown(socket.SHUT_WR)
    ok = conn.recv(1) == b"" and ok
    conn.close()
    with open(result + ".tmp", "w") as f:
        f.write("forked-client: %s; rxe sent_pkts +%d during the last part\n" % ("every byte echoed" if ok else "FAILED", last))
    os.rename(result + ".tmp", result)


main()
