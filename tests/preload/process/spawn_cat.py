"""spawn_cat.py PORT: inetd's shape through posix_spawn instead of fork and exec. It accepts one
connection, starts cat with os.posix_spawnp and file actions that put the connection on cat's standard
input and output (libc's posix_spawn_file_actions_adddup2), closes its own copy and waits for cat.
The spawn moves a connection on RDMA back to TCP, and its return goes along to cat, which takes it
back to RDMA once this process let go of it (docs/architecture.md, "Back to RDMA").
"""
import os
import sys

from test_listener import listening

listener = listening(int(sys.argv[1]))
conn, _ = listener.accept()
fd = conn.fileno()
actions = [(os.POSIX_SPAWN_DUP2, fd, 0), (os.POSIX_SPAWN_DUP2, fd, 1)]
pid = os.posix_spawnp("cat", ["cat"], os.environ, file_actions=actions)
conn.close()
_, status = os.waitpid(pid, 0)
print("cat ended with status %d" % os.waitstatus_to_exitcode(status), file=sys.stderr, flush=True)
