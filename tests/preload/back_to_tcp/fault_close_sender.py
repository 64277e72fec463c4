#!/usr/bin/env python3
"""fault_close_sender.py HOST PORT FILE: the sender of integration.fault_close.pair. Sends FILE, waits
half a second (its bytes are acknowledged: what is left to go is the end), cuts this guest's wire
(netem loss 100%, and $T2R_WORK/outage tells the reader's guest to cut its own), closes the socket
at once and restores the wire 8 s later. The close returns at once (the module ends the stream off the
application's thread); the end cannot reach the reader on RDMA, whose retries run out first: the
stream's path fails after the application closed it, and the end must still reach the reader, on
TCP. Stays until the reader is done ($T2R_WORK/reader.done), as a process whose kernel still holds a
closed socket's bytes would be gone or not."""
import os
import socket
import subprocess
import sys
import time

host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
work, dev = os.environ["T2R_WORK"], os.environ["T2R_NETDEV"]
with open(path, "rb") as f:
    data = f.read()
s = socket.create_connection((host, port))
s.sendall(data)
time.sleep(0.5)
open(os.path.join(work, "outage"), "w").close()
subprocess.run(["tc", "qdisc", "add", "dev", dev, "root", "netem", "loss", "100%"], check=True)
s.close()
print("sender: sent %d bytes and closed during the outage" % len(data), file=sys.stderr, flush=True)
time.sleep(8)
subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], check=True)
for _ in range(1200):
    if os.path.exists(os.path.join(work, "reader.done")):
        break
    time.sleep(0.1)
