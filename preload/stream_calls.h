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

// An upgraded stream held for the length of one call: its socket (and so the stream) is not
// destroyed meanwhile, even when another thread closes the last descriptor; the last holder ends it
// then. The kernel keeps a socket alive the same way while a call is using it: a read blocked in
// one thread goes on after another thread's close(). Converts to the stream, or null when the
// connection is not on RDMA.
// (Left open: the few instructions between the table lookup and taking the reference.)
class StreamRef {
 public:
  StreamRef() noexcept = default;
  StreamRef(TrackedSocket* socket, transport::RdmaStream* stream) noexcept;
  StreamRef(StreamRef&& other) noexcept : socket_(other.socket_), stream_(other.stream_) {
    other.socket_ = nullptr;
    other.stream_ = nullptr;
  }
  StreamRef& operator=(StreamRef&& other) noexcept;
  StreamRef(const StreamRef&) = delete;
  StreamRef& operator=(const StreamRef&) = delete;
  ~StreamRef();

  operator transport::RdmaStream*() const noexcept { return stream_; }
  transport::RdmaStream* operator->() const noexcept { return stream_; }

 private:
  TrackedSocket* socket_ = nullptr;
  transport::RdmaStream* stream_ = nullptr;
};

// The stream of fd when its connection moved to RDMA, held for the caller's call; else empty. One
// table lookup (and, once, the upgrade of a non-blocking connect that has completed since).
StreamRef upgraded_stream(int fd) noexcept;
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
