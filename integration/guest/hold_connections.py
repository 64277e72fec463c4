"""hold_connections.py HOST PORT N BYTES: the client of integration/bench-links.sh.

Opens N connections at once (asyncio), echoes BYTES random bytes through each, waits until every
one is done and still open, then measures this process (while all N are open): what it has pinned
(VmPin), its descriptors, and, if the module says so in TCP2RDMA_LOG, how many connections it put on
RDMA. Then it closes them all. Prints one line of key=value pairs; exits non-zero if any echo differs.
"""
import asyncio
import os
import sys
import time


def status_kib(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return -1


def queue_pairs():
    """The guest's RC queue pairs, from the rdma tool (run without the module): this process is the
    guest's only RDMA user. (Matching our pid would miss those made by the module's upgrade threads,
    which the kernel records under the thread's own id.) Started with posix_spawn, not subprocess:
    subprocess forks (vfork, which the module takes as fork), and a fork moves every connection on RDMA
    back to TCP (the rule on_fork: tcp), which is not what this measures."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    rd, wr = os.pipe()
    try:
        pid = os.posix_spawnp("rdma", ["rdma", "resource", "show", "qp"], env,
                              file_actions=[(os.POSIX_SPAWN_DUP2, wr, 1), (os.POSIX_SPAWN_CLOSE, rd)])
    except OSError:
        os.close(rd)
        os.close(wr)
        return -1
    os.close(wr)
    chunks = []
    while chunk := os.read(rd, 65536):
        chunks.append(chunk)
    os.close(rd)
    os.waitpid(pid, 0)
    out = b"".join(chunks).decode(errors="replace")
    return sum(1 for line in out.splitlines() if " type RC " in line)


async def one(host, port, nbytes, opened):
    for _ in range(50):  # a listen backlog overflow under a burst is the kernel's, not ours
        try:
            reader, writer = await asyncio.open_connection(host, port)
            break
        except ConnectionRefusedError:
            await asyncio.sleep(0.1)
    else:
        raise RuntimeError("refused 50 times")
    opened.append(time.monotonic())
    data = os.urandom(nbytes)
    writer.write(data)
    await writer.drain()
    got = await reader.readexactly(len(data))
    if got != data:
        raise RuntimeError("the echo differs")
    return writer


async def main(host, port, n, nbytes):
    opened = []
    start = time.monotonic()
    results = await asyncio.gather(*[one(host, port, nbytes, opened) for _ in range(n)], return_exceptions=True)
    elapsed = time.monotonic() - start
    failed = [r for r in results if isinstance(r, BaseException)]
    fds = len(os.listdir("/proc/self/fd"))
    print(f"connections={n} echoed={n - len(failed)} bytes_each={nbytes} seconds={elapsed:.1f} "
          f"vmpin_kib={status_kib('VmPin')} vmrss_kib={status_kib('VmRSS')} fds={fds} qps={queue_pairs()}",
          flush=True)
    for r in failed[:5]:
        print(f"failed: {r!r}", flush=True)
    for r in results:
        if not isinstance(r, BaseException):
            r.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
