// The calls of an application on a descriptor whose connection moved onto an RDMA stream: every
// receive variant funnels into stream_recv, every send into stream_send, with kernel TCP's errors
// (EAGAIN, ECONNRESET, EPIPE and SIGPIPE) and flags (MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT,
// MSG_NOSIGNAL, O_NONBLOCK).
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class TrackedSocket;

// The stream of fd when its connection moved to RDMA, else null: one table lookup (and, once, the
// upgrade of a non-blocking connect that has completed since).
transport::RdmaStream* upgraded_stream(int fd) noexcept;
// Runs the upgrade a non-blocking connect left pending, if the connection is up by now. False when it
// failed half-way: the connection must then be reported as reset.
bool finish_pending_upgrade(int fd, TrackedSocket* socket) noexcept;

ssize_t stream_recv(transport::RdmaStream* stream, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
ssize_t stream_send(transport::RdmaStream* stream, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
int stream_shutdown(transport::RdmaStream* stream, int how) noexcept;
// Bytes readable now (FIONREAD).
int stream_readable_bytes(transport::RdmaStream* stream) noexcept;

// poll(2) events of the stream now, among `requested` (POLLIN, POLLOUT; POLLHUP and POLLERR always).
short stream_poll_events(transport::RdmaStream* stream, short requested) noexcept;

}  // namespace tcp2rdma::preload
