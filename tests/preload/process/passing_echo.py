"""passing_echo.py PORT CONNECTIONS: an echo server whose master process accepts every connection and
passes it to a worker process over a unix socket (SCM_RIGHTS), then closes its own copy: the shape of
Node's cluster module (its default round-robin mode), of servers built on multiprocessing's
send_handle, and of master/worker designs that hand connections out. The worker greets each
connection with "ready\n", then echoes until the client's end, and prints one line a connection:
"worker: N BYTES" or "worker: N reset" (a reset is loud, and allowed: a clean end with bytes missing
is not, and the client checks that). The master holds the last connection for 0.5 s before it passes
it: an eager client's bytes are on the way by then (on RDMA, unread: the connection must be reset).
"""
import os
import socket
import sys
import time

from test_listener import listening


def worker(channel, count):
    for i in range(count):
        _, fds, _, _ = socket.recv_fds(channel, 16, 1)
        conn = socket.socket(fileno=fds[0])
        total = 0
        try:
            conn.sendall(b"ready\n")
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                total += len(data)
                conn.sendall(data)
            print(f"worker: {i} {total}", flush=True)
        except OSError as e:
            print(f"worker: {i} reset ({e.strerror})", flush=True)
        conn.close()


def main():
    port, count = int(sys.argv[1]), int(sys.argv[2])
    master_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        master_end.close()
        worker(worker_end, count)
        os._exit(0)
    worker_end.close()
    listener = listening(port, 16)
    for i in range(count):
        conn, _ = listener.accept()
        if i == count - 1:
            time.sleep(0.5)
        socket.send_fds(master_end, [b"c"], [conn.fileno()])
        conn.close()
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))


main()
