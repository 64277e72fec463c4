"""fork_late_cat.py PORT: an accept-then-fork server whose worker is slow to start the service. It
accepts one connection and forks; the child waits 1 s, then execs cat with the connection on its
standard input and output; the parent closes its copy 0.5 s after the fork and waits for the child.
Under background rules the fork defers the connection's upgrade, no process uses it within 200 ms,
so the parent takes it up, and then lets go while the child still holds it: the upgrade must go on
in cat (docs/architecture.md, "Forks"), not stay TCP in both.
"""
import os
import sys
import time

from test_listener import listening

listener = listening(int(sys.argv[1]))
conn, _ = listener.accept()
pid = os.fork()
if pid == 0:
    time.sleep(1.0)
    os.dup2(conn.fileno(), 0)
    os.dup2(conn.fileno(), 1)
    os.execvp("cat", ["cat"])
time.sleep(0.5)
conn.close()
_, status = os.waitpid(pid, 0)
print("cat ended with status %d" % os.waitstatus_to_exitcode(status), file=sys.stderr, flush=True)
