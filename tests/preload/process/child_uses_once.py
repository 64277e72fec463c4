"""child_uses_once.py PORT: an echo server whose forked child uses its connection once (writes
"child\n") and exits; the parent, which keeps the connection, echoes it to the end. The child's use
moves a connection on RDMA back to TCP in both, and the client's bytes that were on the stream unread
stay the parent's to read too (the child reads none); once the child is gone the parent holds the
connection alone, and it goes back to RDMA there (docs/architecture.md, "Forks", "Back to RDMA").
"""
import os
import sys

from test_listener import listening

listener = listening(int(sys.argv[1]))
conn, _ = listener.accept()
pid = os.fork()
if pid == 0:
    conn.sendall(b"child\n")
    os._exit(0)
os.waitpid(pid, 0)
while True:
    data = conn.recv(65536)
    if not data:
        break
    conn.sendall(data)
conn.close()
