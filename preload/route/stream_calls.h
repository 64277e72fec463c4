// The calls of an application on a descriptor whose connection moved onto an RDMA stream: every
// receive variant funnels into stream_recv, every send into stream_send, with kernel TCP's errors
// (EAGAIN, ECONNRESET, EPIPE and SIGPIPE) and flags (MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT,
// MSG_NOSIGNAL, O_NONBLOCK).
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cerrno>
#include <utility>

#include "registry/tracked_socket.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class UpgradeSession;

// An upgraded stream held for the length of one call: its socket (and so the stream) is not
// destroyed meanwhile, even when another thread closes the last descriptor; the last holder ends it
// then (SocketHold). Converts to the stream, or null when the connection is not on RDMA. While the
// connection's handover is under way and it is still on TCP, it holds the session instead (session()
// is set, the stream is null): the call is then made on TCP and counted (session_calls.cpp).
class StreamRef {
 public:
  StreamRef() noexcept = default;
  StreamRef(SocketHold socket, transport::RdmaStream* stream, UpgradeSession* session = nullptr) noexcept
      : socket_(std::move(socket)), stream_(stream), session_(session) {}
  // A socket back on TCP whose prefix is still to be read (move_back.h): reads serve it first.
  static StreamRef prefixed(SocketHold socket) noexcept {
    StreamRef ref(std::move(socket), nullptr);
    ref.prefixed_ = true;
    return ref;
  }
  StreamRef(StreamRef&& other) noexcept
      : socket_(std::move(other.socket_)),
        stream_(std::exchange(other.stream_, nullptr)),
        session_(std::exchange(other.session_, nullptr)),
        prefixed_(std::exchange(other.prefixed_, false)) {}
  StreamRef& operator=(StreamRef&& other) noexcept {
    socket_ = std::move(other.socket_);
    stream_ = std::exchange(other.stream_, nullptr);
    session_ = std::exchange(other.session_, nullptr);
    prefixed_ = std::exchange(other.prefixed_, false);
    return *this;
  }
  StreamRef(const StreamRef&) = delete;
  StreamRef& operator=(const StreamRef&) = delete;

  operator transport::RdmaStream*() const noexcept { return stream_; }
  transport::RdmaStream* operator->() const noexcept { return stream_; }
  UpgradeSession* session() const noexcept { return session_; }
  TrackedSocket* socket() const noexcept { return socket_.get(); }
  bool prefixed() const noexcept { return prefixed_; }
  // Whether the call is the module's to make: on the stream, on TCP counted for a handover, or on TCP
  // after a prefix.
  bool ours() const noexcept { return stream_ != nullptr || session_ != nullptr || prefixed_; }

 private:
  SocketHold socket_;
  transport::RdmaStream* stream_ = nullptr;
  UpgradeSession* session_ = nullptr;
  bool prefixed_ = false;
};

// The stream of fd when its connection moved to RDMA, held for the caller's call; the session when
// its handover is under way and it is still on TCP (a call during the switch itself waits for it to
// end, which takes a few round trips); a prefixed ref when it came back to TCP with bytes still to
// read before the kernel's; else empty. One table lookup (and, once, the upgrade of a
// non-blocking connect that has completed since).
StreamRef upgraded_stream(int fd) noexcept;
// The same for a socket the caller holds already: a call that goes on after a wait (the end of a
// switch) follows the socket it began on, not whatever fd names by then (another thread may have
// closed it and the number may be another socket's).
StreamRef upgraded_stream(SocketHold socket, int fd) noexcept;
// The stream of fd if it has one now, held; never waits and never starts anything (for epoll's
// bookkeeping, which runs under its own lock).
StreamRef current_stream(int fd) noexcept;
// Runs the upgrade a non-blocking connect left pending, if the connection is up by now. False when it
// failed half-way: the connection must then be reported as reset.
bool finish_pending_upgrade(int fd, TrackedSocket* socket) noexcept;

// Runs call(), which returns a count (or 0) on success and -1 with errno set on failure. On success
// errno is left as it was, as the kernel's calls leave it: the module's own system calls on the way (a
// non-blocking look at an eventfd, an interrupted wait) must not show through. (sockperf, for one,
// reads errno after a successful recvfrom() and takes a stale ECONNRESET for the peer's end.)
template <typename Call>
auto keeping_errno_on_success(Call&& call) noexcept {
  const int saved_errno = errno;
  auto result = call();
  if (result >= 0) errno = saved_errno;
  return result;
}

// Every receive and every send of an application call that is ours (StreamRef::ours()).
ssize_t stream_recv(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
ssize_t stream_send(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
// The same on TCP while fd's handover (ref.session()) is still on TCP: the kernel call, counted; when
// the connection moves meanwhile, the call goes on on the stream (session_calls.cpp).
ssize_t session_recv(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
ssize_t session_send(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
int stream_shutdown(transport::RdmaStream* stream, int fd, int how) noexcept;
// Bytes readable now (FIONREAD).
int stream_readable_bytes(transport::RdmaStream* stream) noexcept;

// poll(2) events of the stream now, among `requested` (POLLIN, POLLOUT; POLLHUP and POLLERR always).
// *moved (if given) is set when the stream has moved back to TCP: the socket is to be looked at instead.
short stream_poll_events(transport::RdmaStream* stream, short requested, bool* moved = nullptr) noexcept;
// The same for a socket back on TCP with a prefix: readable now, and the kernel's other events.
short prefixed_poll_events(int fd, short requested) noexcept;

// One kernel call on the socket, as the application asked it (recvmsg or sendmsg).
ssize_t kernel_io(int fd, const iovec* iov, int iovcnt, int flags, bool receiving) noexcept;

}  // namespace tcp2rdma::preload
