"""many_connections.py HOST PORT N BYTES LOG WANT TIMEOUT: the client of integration.many_connections.pair.

One asyncio process opens N connections to an echo server at once and echoes BYTES random bytes
through each (they travel on TCP while the connections upgrade in the background). Then, every
connection still open, it waits up to TIMEOUT seconds until the module's log LOG says WANT of them
are on RDMA, and echoes BYTES more through each (on RDMA for those). Every echo is compared byte for
byte. Prints one line of key=value pairs; exits non-zero if any echo differed or failed, or fewer than
WANT connections were upgraded.
"""
import asyncio
import os
import sys
import time


def count(log, text):
    try:
        with open(log, errors="replace") as f:
            return sum(1 for line in f if text in line)
    except OSError:
        return 0


async def open_one(host, port):
    for _ in range(100):  # a listen backlog overflow under a burst is the kernel's, not ours
        try:
            return await asyncio.open_connection(host, port)
        except ConnectionRefusedError:
            await asyncio.sleep(0.1)
    raise RuntimeError("refused 100 times")


async def echo(pair, nbytes):
    reader, writer = pair
    data = os.urandom(nbytes)
    writer.write(data)
    await writer.drain()
    got = await reader.readexactly(len(data))
    if got != data:
        raise RuntimeError("the echo differs")


async def main(host, port, n, nbytes, log, want, timeout):
    start = time.monotonic()
    opened = await asyncio.gather(*[open_one(host, port) for _ in range(n)], return_exceptions=True)
    pairs = [p for p in opened if not isinstance(p, BaseException)]
    failed = [p for p in opened if isinstance(p, BaseException)]
    first = await asyncio.gather(*[echo(p, nbytes) for p in pairs], return_exceptions=True)
    failed += [r for r in first if isinstance(r, BaseException)]
    echoed = time.monotonic()
    while count(log, "upgraded to rdma") < want and time.monotonic() - start < timeout:
        await asyncio.sleep(0.5)
    upgraded = count(log, "upgraded to rdma")
    waited = time.monotonic()
    second = await asyncio.gather(*[echo(p, nbytes) for p in pairs], return_exceptions=True)
    failed += [r for r in second if isinstance(r, BaseException)]
    end = time.monotonic()
    print(f"connections={n} open={len(pairs)} failed={len(failed)} bytes_each={2 * nbytes} "
          f"upgraded={upgraded} stayed_tcp={count(log, 'stays tcp')} open_and_echo_s={echoed - start:.1f} "
          f"until_upgraded_s={waited - start:.1f} second_echo_s={end - waited:.1f}", flush=True)
    for r in failed[:5]:
        print(f"failed: {r!r}", flush=True)
    for reader, writer in pairs:
        writer.close()
    return 1 if failed or upgraded < want else 0


if __name__ == "__main__":
    a = sys.argv
    sys.exit(asyncio.run(main(a[1], int(a[2]), int(a[3]), int(a[4]), a[5], int(a[6]), float(a[7]))))
