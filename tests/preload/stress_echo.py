#!/usr/bin/env python3
"""Many connections at once against an event-loop echo server (asyncio), every byte checked.

  stress_echo.py server PORT                     echo every connection until the client's end, then
                                                 end ours; serves until killed
  stress_echo.py client HOST PORT CONNS ROUNDS SEED [MAX_BYTES [MIN_BYTES]]
                                                 per round: CONNS connections opened at once, each
                                                 writes its own random bytes (sizes log-uniform in
                                                 MIN_BYTES..MAX_BYTES, default 1 B..4 MiB) in random pieces
                                                 while it reads the echo, half-closes, reads to EOF;
                                                 the echo must equal what was sent, byte for byte

  stress_echo.py fill HOST PORT CONNS           opens CONNS connections one after the other and keeps
                                                 them, each echoing 1 KiB, until one fails; prints how
                                                 many it got and the error that stopped it (the same
                                                 with and without the module: its own descriptors must
                                                 take none of the application's)

The client prints one line per round and exits 1 at the first connection whose echo differs (too
short, too long, other bytes) or fails, naming the connection, the first differing offset and the
bytes found there (hex), so that a foreign byte is never mistaken for a slow one.
"""
import asyncio
import hashlib
import math
import random
import sys
import time


async def serve_one(reader, writer):
    try:
        while True:
            data = await reader.read(256 * 1024)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        await writer.drain()
    except (ConnectionError, OSError) as e:
        print(f"server: connection failed: {e!r}", file=sys.stderr, flush=True)
    finally:
        writer.close()


async def server(port):
    srv = await asyncio.start_server(serve_one, host="0.0.0.0", port=port, backlog=4096)
    print("listening", file=sys.stderr, flush=True)
    async with srv:
        await srv.serve_forever()


def payload(seed, index, max_bytes, min_bytes):
    rng = random.Random(seed * 1_000_003 + index)
    size = max(min_bytes, min(max_bytes, int(math.exp(rng.uniform(math.log(min_bytes), math.log(max_bytes))))))
    return rng.randbytes(size), rng


class Mismatch(Exception):
    pass


async def one_connection(host, port, index, seed, max_bytes, min_bytes):
    data, rng = payload(seed, index, max_bytes, min_bytes)
    for attempt in range(50):  # a listen backlog overflow under a burst is the kernel's, not ours
        try:
            reader, writer = await asyncio.open_connection(host, port)
            break
        except ConnectionRefusedError:
            await asyncio.sleep(0.1)
    else:
        raise Mismatch(f"connection {index}: refused 50 times")

    async def send():
        pos = 0
        while pos < len(data):
            n = min(len(data) - pos, int(math.exp(rng.uniform(0, math.log(1 << 20)))))
            writer.write(data[pos:pos + n])
            await writer.drain()
            pos += n
        writer.write_eof()
        await writer.drain()

    sender = asyncio.ensure_future(send())
    got = bytearray()
    while True:
        chunk = await reader.read(1 << 20)
        if not chunk:
            break
        got += chunk
        if len(got) > len(data):
            break
    await sender
    writer.close()
    if got != data:
        at = next((i for i in range(min(len(got), len(data))) if got[i] != data[i]), min(len(got), len(data)))
        raise Mismatch(f"connection {index}: sent {len(data)} bytes, echo has {len(got)}; first difference at "
                       f"{at}: got {bytes(got[at:at + 64]).hex()} want {data[at:at + 64].hex()}")
    return len(data)


async def client(host, port, conns, rounds, seed, max_bytes, min_bytes):
    for r in range(rounds):
        start = time.monotonic()
        tasks = [one_connection(host, port, i, seed + r * 7919, max_bytes, min_bytes) for i in range(conns)]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failed = [x for x in results if isinstance(x, BaseException)]
        total = sum(x for x in results if not isinstance(x, BaseException))
        digest = hashlib.sha256(str(results).encode()).hexdigest()[:12]
        print(f"round {r + 1}/{rounds}: {conns - len(failed)} of {conns} connections echoed exactly, "
              f"{total} bytes each way, {time.monotonic() - start:.1f} s ({digest})", flush=True)
        for x in failed:
            print(f"round {r + 1}: FAILED {x!r}", flush=True)
        if failed:
            return 1
    return 0


async def fill(host, port, conns):
    held = []
    stopped = "none"
    for i in range(conns):
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as e:
            stopped = f"{type(e).__name__} errno {e.errno}"
            break
        data = random.Random(i).randbytes(1024)
        writer.write(data)
        got = await reader.readexactly(len(data))
        if got != data:
            print(f"fill: connection {i}: the echo differs", flush=True)
            return 1
        held.append(writer)
    print(f"fill: {len(held)} connections, stopped by: {stopped}", flush=True)
    for w in held:
        w.close()
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "server":
        asyncio.run(server(int(argv[2])))
        return 0
    if len(argv) in (7, 8, 9) and argv[1] == "client":
        max_bytes = int(argv[7]) if len(argv) >= 8 else 4 << 20
        min_bytes = int(argv[8]) if len(argv) == 9 else 1
        return asyncio.run(client(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]), max_bytes,
                                  min_bytes))
    if len(argv) == 5 and argv[1] == "fill":
        return asyncio.run(fill(argv[2], int(argv[3]), int(argv[4])))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
