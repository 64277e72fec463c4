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
#include "route/route.h"
#include "util/saved_errno.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class UpgradeSession;

// Where an application's call on fd goes (route/route.h), held for the call: the stream, the session
// while the upgrade is still on TCP, the prefix, or the kernel. A final route: what the lookup found
// not final is done here, in the open: the pending upgrade of a non-blocking connect that has
// completed since is run (once), a switch under way is waited for (a few round trips). On a settled
// connection: one table lookup and one look at the path.
// `use`: kRead for a call that only reads (read, recv and their variants, FIONREAD, a poll for input
// only): in a forked child, such a call claims a connection its parent keeps on RDMA for reading only,
// which the parent may relay (back_to_tcp/read_relay.h); every other call claims it whole.
// kEnd: a shutdown. It never starts a return to RDMA: that return's switch would find TCP's sending
// side ended under it, where its record must go, and reset the connection.
enum class CallUse : uint8_t { kAny, kRead, kEnd };
// A poll for input only reads.
inline CallUse use_of(short poll_events) noexcept {
  return (poll_events & ~(POLLIN | POLLRDNORM | POLLPRI | POLLRDHUP)) == 0 ? CallUse::kRead : CallUse::kAny;
}
StreamRef route_for_call(int fd, CallUse use = CallUse::kAny) noexcept;
// The same for a socket the caller holds already: a call that goes on after a wait (the end of a
// switch) follows the socket it began on, not whatever fd names by then (another thread may have
// closed it and the number may be another socket's).
StreamRef route_for_call(SocketHold socket, int fd, CallUse use = CallUse::kAny) noexcept;
// Every receive and every send of an application call that is ours (StreamRef::ours()).
ssize_t stream_recv(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
ssize_t stream_send(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
// The same on TCP while fd's upgrade (ref.session()) is still on TCP: the kernel call, counted; when
// the connection moves meanwhile, the call goes on on the stream (session_calls.cpp).
ssize_t session_recv(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
ssize_t session_send(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;
int stream_shutdown(const StreamRef& ref, int fd, int how) noexcept;
// SO_ERROR's value for a connection on RDMA: the stream's pending error (RdmaStream::take_error),
// taken; 0 when there is none, or the connection is in its upgrade or on a prefix.
int stream_take_error(const StreamRef& ref) noexcept;
// The application uncorked (or set TCP_NODELAY): the message its corked writes held on the
// connection's stream goes now, if the connection is on RDMA.
void push_held_now(TrackedSocket* socket) noexcept;
// Bytes readable now (FIONREAD).
int stream_readable_bytes(transport::RdmaStream* stream) noexcept;

// An application's call on a stream found this direction moved to TCP (kMovedToTcp, or a blocking
// call cut short at the marker): it goes on on the socket, after the socket's prefix for a read
// (prefix_calls.cpp).
ssize_t tcp_after_move(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags,
                       bool receiving) noexcept;
// A read on a socket with a prefix (TcpPrefix::present()): back on TCP, or read through a relay
// (back_to_tcp/read_relay.h): the prefix first, waiting for a relay's bytes; MSG_WAITALL goes on into
// the kernel for the rest once the prefix says the kernel's bytes follow.
ssize_t prefix_recv(TrackedSocket* socket, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept;

// One kernel call on the socket, as the application asked it (recvmsg or sendmsg).
ssize_t kernel_io(int fd, const iovec* iov, int iovcnt, int flags, bool receiving) noexcept;

// A call that began on one route and goes on where every call on the socket goes now (a session that
// ended, a path that failed over, a move back that is over): route_for_call's route, held for it, so
// that its kernel call is counted as any while a return to RDMA is planned.
ssize_t call_where_it_belongs(const StreamRef& began, int fd, const iovec* iov, int iovcnt, int msg_flags,
                              bool receiving) noexcept;

}  // namespace tcp2rdma::preload
