"""The listening socket of the Python test servers here: every address, the port reusable at once,
and "listening" said on standard error once it listens (integration/guest/wait-listening.sh waits for
it)."""
import socket
import sys


def listening(port, backlog=4):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(backlog)
    print("listening", file=sys.stderr, flush=True)
    return listener
