#!/usr/bin/env python3
"""chaos_echo.py server PORT SECONDS | client HOST PORT THREADS ROUNDS SEED | final HOST PORT N

integration/soak-chaos's programs. A thread-per-connection echo server (socketserver), and clients
whose threads mix clean transfers (random bytes, half-close, the echo compared byte for byte) with
resets (SO_LINGER 0), closes with the server's bytes unread and connections closed at once. A clean
transfer that comes back short, different or failed prints BAD or ERR with its local port (to find
it in the module's log) and fails the client. The server stops when SECONDS pass or the file named
by CHAOS_STOP appears, and fails if any handler is still in a call 30 s later (a connection whose
end never reached it)."""
import hashlib, os, random, socket, socketserver, struct, sys, threading, time

active = 0
lock = threading.Lock()
ends = {}
handlers = set()

def note(k):
    with lock:
        ends[k] = ends.get(k, 0) + 1

class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        global active
        s = self.request
        try:
            peer = s.getpeername()
        except OSError:
            peer = ('gone', 0)
        with lock:
            active += 1
            handlers.add(peer)
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    note('eof'); break
                s.sendall(b)
        except ConnectionResetError:
            note('reset')
        except BrokenPipeError:
            note('pipe')
        except OSError as e:
            note('oserror-%d' % e.errno)
        finally:
            with lock:
                active -= 1
                handlers.discard(peer)

class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

def server(port, seconds):
    srv = Server(('0.0.0.0', port), Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True); t.start()
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(1)
        if os.path.exists(os.environ.get('CHAOS_STOP', '/tmp/chaos-stop')):
            break
    # Every handler must have ended: none stuck on a connection whose peer is gone.
    for _ in range(60):
        with lock:
            if active == 0: break
        time.sleep(0.5)
    print('server: active', active, sorted(handlers), 'ends', dict(sorted(ends.items())), flush=True)
    sys.exit(0 if active == 0 else 1)

def port_of(s):
    try: return s.getsockname()[1]
    except OSError: return -1

def stale(got, data):
    # Where the wrong bytes came from, if they are the stream's own from an earlier offset (a ring's
    # lap, a message's length before): each wrong run of the reply, and its source if found.
    n = min(len(got), len(data)); i = 0
    while i < n:
        if got[i] == data[i]:
            i += 1; continue
        j = i
        while j < n and got[j] != data[j]: j += 1
        piece = bytes(got[i:min(j, i + 64)])
        src = data.find(piece)
        print('  wrong %d..%d (%d bytes); its first 64 bytes are the stream\'s at %s' % (i, j, j - i, src if src >= 0 else 'none'), flush=True)
        i = j

def clean(host, port, rnd):
    n = int(10 ** rnd.uniform(0, 6.3))
    data = rnd.randbytes(n)
    s = socket.create_connection((host, port))
    got = bytearray()
    err = []
    def reader():
        try:
            while True:
                b = s.recv(65536)
                if not b: break
                got.extend(b)
        except OSError as e:
            err.append(e)
    t = threading.Thread(target=reader); t.start()
    lp = s.getsockname()[1]
    try:
        s.sendall(data); s.shutdown(socket.SHUT_WR); t.join()
    except OSError as e:
        print('ERR port %d: %s after %d of %d back' % (lp, e, len(got), n), flush=True); raise
    s.close()
    if err: print('ERR port %d: reading: %s after %d of %d back' % (lp, err[0], len(got), n), flush=True); raise err[0]
    if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
        print('BAD port %d got %d of %d, first difference at %d' % (lp, len(got), n,
              next((i for i in range(min(len(got), n)) if got[i] != data[i]), min(len(got), n))), flush=True)
        stale(got, data)
        return 'BAD %d/%d' % (len(got), n)
    return 'ok'

def reset(host, port, rnd):
    s = socket.create_connection((host, port))
    s.sendall(rnd.randbytes(rnd.randint(1, 200000)))
    time.sleep(rnd.uniform(0, 0.05))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    s.close()
    return 'ok'

def unread(host, port, rnd):
    s = socket.create_connection((host, port))
    s.sendall(rnd.randbytes(rnd.randint(1000, 300000)))
    s.recv(100)
    s.close()
    return 'ok'

def early(host, port, rnd):
    s = socket.create_connection((host, port)); s.close(); return 'ok'

def client(host, port, threads, rounds, seed):
    res = {}; rl = threading.Lock()
    def work(i):
        rnd = random.Random(seed * 1000 + i)
        for r in range(rounds):
            kind = rnd.choice([clean, clean, reset, unread, early])
            try:
                out = kind(host, port, rnd)
            except OSError as e:
                out = 'ERR %s %s' % (kind.__name__, e)
                if kind is not clean: out = 'ok'  # a reset racing our own close is fine
            with rl:
                k = kind.__name__ + ':' + out
                res[k] = res.get(k, 0) + 1
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print('client:', dict(sorted(res.items())), flush=True)
    bad = [k for k in res if 'BAD' in k or 'ERR' in k]
    sys.exit(1 if bad else 0)

if __name__ == '__main__':
    a = sys.argv
    if a[1] == 'server': server(int(a[2]), int(a[3]))
    elif a[1] == 'client': client(a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]))
    elif a[1] == 'final':
        rnd = random.Random(7); outs = [clean(a[2], int(a[3]), rnd) for _ in range(int(a[4]))]
        print('final:', outs.count('ok'), 'of', len(outs), flush=True); sys.exit(0 if outs.count('ok') == len(outs) else 1)
