"""stat_guest.py TOOL PEER: `tcp2rdma stat` seen from a program under the module, in the Soft-RoCE guest.

This process (run with the module preloaded and integration/rules/sized-rdma.yaml: port 5012 goes
over RDMA before connect() returns) serves port 5012 and port 5025 (no rule: TCP), then:
  - sends 8 MiB to 5012 in 1 MiB pieces; after the 3rd and the 6th piece `tcp2rdma stat --json`
    (run without the module) must show the client's connection on RDMA with exactly the bytes sent so
    far, by zero-copy, with its ring, and rxe's own packet counter must have grown by at least those
    bytes in packets of the largest RoCE MTU (4096 bytes): the bytes stat counts went through rxe;
  - once the server has read all 8 MiB, the server's connection must show exactly that many bytes in;
  - the client's credit stalls (its writes waited for room) show after the path watcher's next look;
  - a connection to 5025 must show path tcp, with the rules' reason and the kernel's count of the 1000
    bytes each side moved.
Exits non-zero at the first difference, printing what stat said.
"""
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

MIB = 1 << 20
tool, peer = sys.argv[1], sys.argv[2]
plain_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
# The tool runs in a process started before any connection: a program under the module that starts a
# child moves its connections on RDMA back to TCP first (the rules' on_fork, by default), and stat
# would rightly show them back on tcp.
ASK = """import subprocess, sys
for pid in sys.stdin:
    r = subprocess.run([sys.argv[1], "stat", "-a", "--json", "--pid", pid.strip()], capture_output=True, text=True)
    print(r.stdout.strip() if r.returncode == 0 else "{}", flush=True)
"""
asker = subprocess.Popen([sys.executable, "-c", ASK, tool], env=plain_env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)


def stat():
    asker.stdin.write(f"{os.getpid()}\n")
    asker.stdin.flush()
    return json.loads(asker.stdout.readline())["processes"][0]["connections"]


def slot(conns, role, port):
    key = "remote" if role == "client" else "local"
    found = [c for c in conns if c["role"] == role and c[key].endswith(f":{port}")]
    if len(found) != 1:
        sys.exit(f"stat_guest: {len(found)} {role} connections on port {port} in {json.dumps(conns)}")
    return found[0]


def rxe_sent_packets():
    """rxe's count of packets it sent, kept by the kernel driver (integration/guest/rdma-counters)."""
    dev = os.environ.get("T2R_RDMA_DEV", "rxe0")
    with open(f"/sys/class/infiniband/{dev}/ports/1/hw_counters/sent_pkts") as f:
        return int(f.read())


def expect(what, ok, conn):
    print(f"stat_guest: {what}: {'yes' if ok else 'NO'}", flush=True)
    if not ok:
        sys.exit(f"stat_guest: stat said {json.dumps(conn)}")


class Server(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.listener = socket.create_server(("0.0.0.0", port), reuse_port=False)
        self.received, self.digest, self.done, self.conn = 0, hashlib.sha256(), threading.Event(), None

    def run(self):
        self.conn, _ = self.listener.accept()
        while piece := self.conn.recv(MIB):
            self.received += len(piece)
            self.digest.update(piece)
        self.done.set()  # the connection stays open, for stat to see


rdma_server, tcp_server = Server(5012), Server(5025)
rdma_server.start()
tcp_server.start()

client = socket.create_connection((peer, 5012))
packets_before = rxe_sent_packets()
sent = hashlib.sha256()
for i in range(1, 9):
    piece = os.urandom(MIB)
    client.sendall(piece)
    sent.update(piece)
    if i in (3, 6):
        c = slot(stat(), "client", 5012)
        expect(f"after {i} MiB the client is on rdma with exactly {i} MiB out", c["path"] == "rdma" and
               c["rdma_bytes_out"] == i * MIB and c["tcp_bytes_out"] == 0, c)
        expect("  by zero-copy, with its ring", c["zcopy_bytes_out"] == i * MIB and c["ring_kib"] > 0, c)
        packets = rxe_sent_packets() - packets_before
        expect(f"  and rxe sent at least {c['rdma_bytes_out'] // 4096} packets for them ({packets})",
               packets >= c["rdma_bytes_out"] // 4096, c)
client.shutdown(socket.SHUT_WR)
rdma_server.done.wait(60)
expect("the server read every byte, exact", rdma_server.received == 8 * MIB and
       rdma_server.digest.digest() == sent.digest(), {"received": rdma_server.received})
s = slot(stat(), "server", 5012)
expect("the server's connection shows 8 MiB in on rdma", s["path"] == "rdma" and s["rdma_bytes_in"] == 8 * MIB, s)
# 8 MiB into a 256 KiB ring waits for room again and again; the path watcher copies the stream's own
# counts into the slot at its next look (every keepalive interval, 10 s by default).
deadline = time.monotonic() + 20
while (c := slot(stat(), "client", 5012))["credit_stalls"] == 0 and time.monotonic() < deadline:
    time.sleep(0.5)
expect("the client's credit stalls show after the path watcher's look", c["credit_stalls"] > 0, c)

plain = socket.create_connection((peer, 5025))
plain.sendall(b"t" * 1000)
plain.shutdown(socket.SHUT_WR)
tcp_server.done.wait(30)
t = slot(stat(), "client", 5025)
expect("the connection no rule selects is on tcp, with the rules' reason", t["path"] == "tcp" and
       t["reason"] == "rule" and t["reason_text"] != "" and t["rdma_bytes_out"] == 0, t)
expect("  and the kernel's count of its bytes: exactly the 1000 sent", t["tcp_bytes_out"] == 1000, t)
u = slot(stat(), "server", 5025)
expect("  and the 1000 its server read", u["tcp_bytes_in"] == 1000 and u["path"] == "tcp", u)
print("stat_guest: stat showed every connection as it is", flush=True)
