// Moving a connection that is on RDMA back onto its TCP socket (docs/architecture.md, "Back to
// TCP"), so that a forked child (or an exec'd program) can use it: the TCP socket has stayed
// connected and idle since the switch, and both processes share it as they would without the shim.
// The side that moves sends its "to TCP" marker and takes the peer's unread stream bytes as the
// socket's prefix; the peer's stack answers with its own marker, and its application's calls move
// to TCP when they reach it (tcp_after_move).
#pragma once

#include "registry/lent_streams.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class TrackedSocket;

// Before fork (why: "fork") or exec ("exec"): every connection of this process on RDMA whose rule
// says on_fork: tcp goes back to TCP. One that cannot (the peer does not answer in the stream's
// timeout) stays on RDMA in this process, and a child's copy fails loudly as with on_fork: parent.
// `returning` (a change of credentials: this process goes on using every connection alone): each
// marker says so, and each return is due at this process's next call (return_plan.h, hurry).
void move_streams_back(const char* why, bool returning = false) noexcept;

// One connection (fd names it, stream is its socket's): true when it is back on TCP.
bool move_back(TrackedSocket* socket, transport::RdmaStream* stream, int fd, const char* why) noexcept;

// A child's claim of a connection this process lent it at a fork (process/fork_service.h): the
// connection goes back to TCP here as it would before a fork, and the peer's unread bytes go to the
// child instead of this process's prefix (the kernel gives a byte to whichever process reads it first,
// and the child is the one reading). One back on TCP already hands the child what is left of its
// prefix. A move that fails leaves the connection on RDMA here (kParents).
// `why` names the children's side for the log ("a child that uses it").
HandBack move_back_for_child(TrackedSocket* socket, const char* why) noexcept;

// The socket's stream has moved both ways (RdmaStream::moved()): the socket is the kernel's again.
// mark_connection_back_on_tcp (registry/connection_path.h) and the epoll registrations back onto the
// socket, together (epoll_move_back). Idempotent; not under epoll's lock (it takes it).
void complete_move_back(TrackedSocket* socket, int fd, bool by_mover = false) noexcept;

// A descriptor of `socket` in this process, or -1 (its last one is being closed, or a relay holds a
// socket this process closed: back_to_tcp/read_relay.h).
int descriptor_of(const TrackedSocket* socket) noexcept;

}  // namespace tcp2rdma::preload
