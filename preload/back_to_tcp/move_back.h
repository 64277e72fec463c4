// Moving a connection that is on RDMA back onto its TCP socket (docs/architecture.md, "Back to
// TCP"), so that a forked child (or an exec'd program) can use it: the TCP socket has stayed
// connected and idle since the switch, and both processes share it as they would without the shim.
// The side that moves sends its "to TCP" marker and takes the peer's unread stream bytes as the
// socket's prefix; the peer's stack answers with its own marker, and its application's calls move
// to TCP when they reach it (tcp_after_move).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

namespace tcp2rdma::preload {

class StreamRef;
class TrackedSocket;
}  // namespace tcp2rdma::preload

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

// Before fork (why: "fork") or exec ("exec"): every connection of this process on RDMA whose rule
// says on_fork: tcp goes back to TCP. One that cannot (the peer does not answer in the stream's
// timeout) stays on RDMA in this process, and a child's copy fails loudly as with on_fork: parent.
void move_streams_back(const char* why) noexcept;

// One connection (fd names it, stream is its socket's): true when it is back on TCP.
bool move_back(TrackedSocket* socket, transport::RdmaStream* stream, int fd, const char* why) noexcept;

// The socket's stream has moved both ways (RdmaStream::moved()): the socket is the kernel's again.
// Its TCP sending side is shut down if the stream's was, and epoll registrations go back onto it.
// Idempotent; not under epoll's lock (epoll_sets.cpp does its part itself, then calls
// settle_move_back). Does nothing while another thread is moving the connection (TrackedSocket::
// moving_back: a fork), unless called by that thread (`by_mover`): it finishes once the prefix is set.
void complete_move_back(TrackedSocket* socket, int fd, bool by_mover = false) noexcept;
// complete_move_back without the epoll part. True for the one call that did it.
bool settle_move_back(TrackedSocket* socket, int fd, bool by_mover = false) noexcept;

// An application's call on a stream found this direction moved to TCP (kMovedToTcp, or a blocking
// call cut short at the marker): it goes on on the socket, after the socket's prefix for a read.
ssize_t tcp_after_move(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags,
                       bool receiving) noexcept;

// A read on a socket back on TCP with a prefix (TcpPrefix::present()): the prefix first; MSG_WAITALL
// goes on into the kernel for the rest.
ssize_t prefix_recv(TrackedSocket* socket, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;

}  // namespace tcp2rdma::preload
