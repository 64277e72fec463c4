"""privilege_drop.py server PORT N | client HOST PORT N MIB: a server deployed as daemons are.

server: binds and listens on PORT as root, then drops to nobody (setgroups, setgid, setuid, in that
        order, as daemons do), then serves N connections one after another: reads until the client's
        end of stream, answers with the sha256 of what it read, closes. Prints "ready" once it has
        dropped its privileges, and "served N" when done; then waits to be stopped, as a daemon would.
        With KEEP_PRIVILEGES=1 it drops nothing (a plain digest server for other tests).
client: opens N connections to HOST:PORT, each sending MIB MiB of random bytes and then shutting its
        sending side; checks that each answer is the sha256 of what it sent. With FORK_AFTER=K it
        forks after its K-th connection: the child makes the next connection and exits, then the parent
        goes on (a process whose parent used RDMA makes RDMA connections of its own).
Exits non-zero on any difference or failure.
"""
import hashlib
import os
import signal
import socket
import sys


def serve(port, n):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(16)
    if os.environ.get("KEEP_PRIVILEGES") != "1":
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        if os.getuid() != 65534 or os.geteuid() != 65534:
            raise RuntimeError("the privileges were not dropped")
    print("ready", flush=True)
    for _ in range(n):
        conn, _ = listener.accept()
        digest = hashlib.sha256()
        while True:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            digest.update(chunk)
        conn.sendall(digest.hexdigest().encode())
        conn.close()
    print("served %d" % n, flush=True)
    signal.pause()


def one_connection(host, port, mib, i):
    data = os.urandom(mib << 20)
    sock = socket.create_connection((host, port))
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    answer = b""
    while True:
        chunk = sock.recv(128)
        if not chunk:
            break
        answer += chunk
    sock.close()
    if answer.decode() != hashlib.sha256(data).hexdigest():
        raise RuntimeError("connection %d (pid %d): the server read different bytes" % (i, os.getpid()))
    print("connection %d (pid %d): sha256 equal" % (i, os.getpid()), flush=True)


def client(host, port, n, mib):
    fork_after = int(os.environ.get("FORK_AFTER", "0"))
    i = 0
    while i < n:
        one_connection(host, port, mib, i)
        i += 1
        if i == fork_after and i < n:
            child = os.fork()
            if child == 0:
                code = 1
                try:
                    one_connection(host, port, mib, i)
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(child, 0)
            if status != 0:
                raise RuntimeError("the child failed")
            i += 1


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]), int(sys.argv[3]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
