// Servers that lately refused this process RDMA: a client connection to one of them stays TCP at once,
// without an RDMA connection attempt (docs/architecture.md, "A switch that fails costs nothing").
//
// A refused attempt costs the connection that made it an rdma_cm round trip and a queue pair (8 ms
// on the emulated testbed), a silent server its whole setup timeout; a server that keeps refusing (no
// tcp2rdma, its rules keep the port on TCP, no memory it may register) would make every connection
// pay it again: nginx with `Connection: close`, whose switches all fail, served a quarter of its
// requests on the port the rules put on RDMA. So a refusal is remembered for the server's address and
// port, 1 s after the first and twice as long after each further one (at most 64 s), and any RDMA
// connection to it made meanwhile forgets it. Per process: a forked child or a new credential
// generation starts without (the refusal may have been about the parent's resources).
#pragma once

#include <sys/socket.h>

#include <chrono>

#include "status.h"
#include "wire.h"

namespace tcp2rdma::preload {

// How long the server at `server` (its address and port) is still taken at its last refusal; zero when
// it is not.
std::chrono::milliseconds refused_for(const sockaddr_storage& server) noexcept;
// The server refused (declined, had no listener, never answered).
void note_refusal(const sockaddr_storage& server) noexcept;
// An RDMA connection to the server was made: it is forgotten.
void note_acceptance(const sockaddr_storage& server) noexcept;

// Whether a client's failed attempt (`s`, and the server's `declined` reason when it gave one) for
// the connection on `fd` is a refusal to remember: a no the server would give again (no listener, its
// rules, its memory) or its silence is; a no about this one connection's timing (busy, expired, too
// late, a duplicate) is not, nor any answer for a connection that ended meanwhile (`settled`: closed,
// forked or exec'd away here; or closed by the server, as TCP_INFO's state says): the failure may be
// that end's, the server's process gone with its RDMA listener, and a load tool's short connections,
// each gone before its setup, would put the server aside for the next ones.
bool refusal_to_remember(int fd, bool settled, transport::Status s, transport::DeclineReason declined) noexcept;

}  // namespace tcp2rdma::preload
