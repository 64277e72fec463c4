#!/usr/bin/env python3
"""forking_echo.py PORT: an echo server as Python's socketserver.ForkingTCPServer makes one: the
parent accepts, forks a child per connection and closes its copy; the child echoes until the
client's end. Says "listening" on standard error once it listens."""
import socketserver
import sys


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


class Server(socketserver.ForkingTCPServer):
    allow_reuse_address = True
    request_queue_size = 64


with Server(("0.0.0.0", int(sys.argv[1])), Echo) as server:
    sys.stderr.write("listening\n")
    sys.stderr.flush()
    server.serve_forever()
