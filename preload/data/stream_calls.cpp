#include "data/stream_calls.h"

#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "back_to_tcp/move_back.h"
#include "back_to_tcp/path_watcher.h"
#include "libc/real_calls.h"
#include "process/deferred_upgrade.h"
#include "process/fork_service.h"
#include "rdma_stream.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "stats/stats_writer.h"
#include "upgrade/return_to_rdma.h"
#include "upgrade/upgrade.h"
#include "util/iovecs.h"
#include "util/log.h"
#include "util/signal_restart.h"

namespace tcp2rdma::preload {
namespace {

using transport::Status;

bool nonblocking(const StreamRef& ref, int msg_flags) {
  return (msg_flags & MSG_DONTWAIT) || ref.socket()->nonblocking.load(std::memory_order_relaxed);
}

// The one place a transport status becomes an errno.
int errno_of(Status s) {
  switch (s) {
    case Status::kWouldBlock: return EAGAIN;
    case Status::kShutDown: return EPIPE;
    case Status::kTimeout: return ETIMEDOUT;
    case Status::kReset:
    case Status::kProtocolError: return ECONNRESET;
    case Status::kInvalid: return EINVAL;
    case Status::kInterrupted: return EINTR;
    default: return EIO;
  }
}

}  // namespace

StreamRef route_for_call(int fd, CallUse use) noexcept { return route_for_call(SocketHold::of(fd), fd, use); }

StreamRef route_for_call(SocketHold socket, int fd, CallUse use) noexcept {
  // Held throughout: an upgrade or a switch may take a while, and a close meanwhile must not free
  // the socket.
  if (socket && socket->stream_of_parent()) {
    // A forked child's first use of a connection its parent lent it: the parent hands it over on TCP
    // (process/fork_service.h), or relays its bytes for a child that reads, or it fails loudly here.
    // A read through the relay claims nothing more.
    bool reading = use == CallUse::kRead;
    if (!reading || !socket->prefix.relayed()) claim_from_parent(socket.get(), fd, reading);
  }
  if (socket && socket->has_deferred_upgrade()) {
    // An upgrade a fork interrupted: this process uses the connection, and takes the upgrade up (a
    // child after its parent's answer: process/deferred_upgrade.h).
    take_up_deferred_upgrade(socket.get(), fd);
  }
  // Back on TCP: the call that finds a return to RDMA due starts it beside the application.
  if (socket && use != CallUse::kEnd) return_if_due(socket.get(), fd, learn_if_alone);
  StreamRef route = route_of(SocketHold(socket.get()));
  if (route.kind() == StreamRef::Kind::kPending) {
    // The call that finds the non-blocking connect complete runs its upgrade (once: the others see
    // it pending no longer); one that finds it still under way goes to the kernel.
    finish_pending_upgrade(fd, socket.get());
    route = route_of(SocketHold(socket.get()));
    if (route.kind() == StreamRef::Kind::kPending) return {};
  }
  if (UpgradeSession* switching = route.switching_session(); switching != nullptr) {
    switching->wait_over();  // the switch takes a few round trips; it never waits on the application
    route = route_of(SocketHold(socket.get()));
  }
  bool on_tcp = route.kind() == StreamRef::Kind::kKernel || route.kind() == StreamRef::Kind::kPrefixed;
  if (on_tcp && socket && socket->returns.armed() && socket->back_on_tcp()) {
    // Back on TCP with a return planned: the kernel's call is counted while it lasts, unless a return
    // started meanwhile, whose session the call then goes through. So is a call that reads the prefix
    // first: it goes on in the kernel once the prefix is taken (MSG_WAITALL), and a write beside it
    // may wait in the kernel's send for as long as the peer does not read.
    socket->begin_tcp_call();
    if (!socket->session_started()) return StreamRef::counted_on_tcp(route.kind(), std::move(socket));
    socket->end_tcp_call();
    route = route_of(std::move(socket));
  }
  return route;
}

namespace {

// The first time a connection's stream fails, the log says why (once per connection).
void log_failure(const StreamRef& ref, int fd, Status s) {
  if (s != Status::kReset && s != Status::kProtocolError && s != Status::kTimeout) return;
  if (ref.socket()->failure_logged.exchange(true, std::memory_order_relaxed)) return;
  transport::RdmaStream* stream = ref;
  log_line("fd %d: the rdma stream failed (%s): %s", fd, transport::to_string(s), stream->failure_detail().c_str());
}

// The stream's path failed (kPathFailed): the call waits for the failover (path_watcher.h), or says
// EAGAIN when non-blocking, then goes where the connection is now: TCP after the prefix, or the
// stream's reset when no failover could happen.
ssize_t after_failover(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags, bool receiving) {
  switch (await_failover(ref.socket(), fd, nonblocking(ref, msg_flags))) {
    case FailoverWait::kWouldBlock: errno = EAGAIN; return -1;
    case FailoverWait::kInterrupted: errno = EINTR; return -1;
    case FailoverWait::kOver: break;
  }
  return call_where_it_belongs(ref, fd, iov, iovcnt, msg_flags, receiving);
}

// A blocking call that moved `done` bytes on the stream before its path failed: the rest after the
// failover, on TCP, as one call (MSG_WAITALL, or a send that returns only when all is taken).
ssize_t rest_after_failover(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags, size_t done,
                            bool receiving) {
  std::vector<iovec> rest = iov_after(iov, iovcnt, done);
  ssize_t more = after_failover(ref, fd, rest.data(), static_cast<int>(rest.size()), msg_flags, receiving);
  return static_cast<ssize_t>(done + (more > 0 ? static_cast<size_t>(more) : 0));
}

// A call that moved `done` bytes on the stream and goes on on TCP for the rest (move_back.h).
ssize_t rest_on_tcp(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags, size_t done,
                    bool receiving) {
  std::vector<iovec> rest = iov_after(iov, iovcnt, done);
  ssize_t more = tcp_after_move(ref, fd, rest.data(), static_cast<int>(rest.size()), msg_flags, receiving);
  if (more < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
  return static_cast<ssize_t>(done + static_cast<size_t>(more));
}

ssize_t recv_on_stream(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  transport::RdmaStream* stream = ref;
  int flags = 0;
  if (nonblocking(ref, msg_flags)) flags |= transport::kNonBlocking;
  if (msg_flags & MSG_PEEK) flags |= transport::kPeek;
  if (msg_flags & MSG_WAITALL) flags |= transport::kWaitAll;
  size_t done = 0;
  Status s = stream->read(iov, iovcnt, flags, &done);
  while (s == Status::kInterrupted && !interrupted_call_fails()) s = stream->read(iov, iovcnt, flags, &done);
  if (s == Status::kMovedToTcp) return tcp_after_move(ref, fd, iov, iovcnt, msg_flags, true);
  if (s == Status::kPathFailed) return after_failover(ref, fd, iov, iovcnt, msg_flags, true);
  // MSG_WAITALL stopped at the peer's marker, or at the path's failure: the rest comes on TCP.
  if (s == Status::kOk && (flags & transport::kWaitAll) && done > 0 && done < iov_total(iov, iovcnt)) {
    if (stream->reads_moved()) return rest_on_tcp(ref, fd, iov, iovcnt, msg_flags, done, true);
    if (stream->failover_pending()) return rest_after_failover(ref, fd, iov, iovcnt, msg_flags, done, true);
  }
  if (s != Status::kOk) {
    log_failure(ref, fd, s);
    errno = errno_of(s);
    return -1;
  }
  if (!(msg_flags & MSG_PEEK)) stats::slot_add_rdma(ref.socket()->stats_slot.load(std::memory_order_relaxed), done, 0, 0);
  return static_cast<ssize_t>(done);
}

ssize_t send_on_stream(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  transport::RdmaStream* stream = ref;
  size_t done = 0, zero_copied = 0;
  int flags = nonblocking(ref, msg_flags) ? transport::kNonBlocking : 0;
  // More follows (MSG_MORE, TCP_CORK): the stream may hold the bytes back to go with the next ones,
  // as the kernel holds a partial segment; the path watcher sends them within 200 ms if nothing else does.
  const bool more = (msg_flags & MSG_MORE) || ref.socket()->corked.load(std::memory_order_relaxed);
  if (more) flags |= transport::kMore;
  Status s = stream->write(iov, iovcnt, flags, &done, &zero_copied);
  while (s == Status::kInterrupted && !interrupted_call_fails()) s = stream->write(iov, iovcnt, flags, &done, &zero_copied);
  if (more && done > 0 && stream->holds_message()) push_held_later(ref.socket());
  stats::slot_add_rdma(ref.socket()->stats_slot.load(std::memory_order_relaxed), 0, done, zero_copied);
  if (s == Status::kMovedToTcp) return tcp_after_move(ref, fd, iov, iovcnt, msg_flags, false);
  if (s == Status::kPathFailed) return after_failover(ref, fd, iov, iovcnt, msg_flags, false);
  // A blocking write cut short at our marker, or by the path's failure: the rest goes on TCP, right
  // after it (after the failover's resend).
  if (s == Status::kOk && !(flags & transport::kNonBlocking) && done < iov_total(iov, iovcnt)) {
    if (stream->writes_moved()) return rest_on_tcp(ref, fd, iov, iovcnt, msg_flags, done, false);
    if (stream->failover_pending()) return rest_after_failover(ref, fd, iov, iovcnt, msg_flags, done, false);
  }
  if (s == Status::kOk) return static_cast<ssize_t>(done);
  log_failure(ref, fd, s);
  // Writing to a connection that is shut down or reset raises SIGPIPE, as the kernel does, unless the
  // caller said MSG_NOSIGNAL.
  if ((s == Status::kShutDown || s == Status::kReset) && !(msg_flags & MSG_NOSIGNAL)) raise(SIGPIPE);
  errno = s == Status::kReset ? EPIPE : errno_of(s);
  return -1;
}

}  // namespace

ssize_t stream_recv(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  return keeping_errno_on_success([&] {
    // A stream whose bytes a relay takes for a child and this process (back_to_tcp/read_relay.h).
    bool relayed = ref.kind() == StreamRef::Kind::kStream && ref.socket()->prefix.present();
    if (ref.prefixed() || relayed) return prefix_recv(ref.socket(), fd, iov, iovcnt, msg_flags);
    return ref.session() != nullptr ? session_recv(ref, fd, iov, iovcnt, msg_flags)
                                    : recv_on_stream(ref, fd, iov, iovcnt, msg_flags);
  });
}

ssize_t stream_send(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  return keeping_errno_on_success([&] {
    if (ref.prefixed()) return kernel_io(fd, iov, iovcnt, msg_flags, false);
    return ref.session() != nullptr ? session_send(ref, fd, iov, iovcnt, msg_flags)
                                    : send_on_stream(ref, fd, iov, iovcnt, msg_flags);
  });
}

int stream_shutdown(const StreamRef& ref, int fd, int how) noexcept {
  // Only the sending side has something to tell the peer; the TCP connection stays whole as the
  // control channel.
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
    errno = EINVAL;
    return -1;
  }
  transport::RdmaStream* stream = ref;
  if (how != SHUT_WR) stream->shutdown_read();
  if (how == SHUT_RD) return 0;
  return keeping_errno_on_success([&] {
    Status s = stream->shutdown_write();
    if (s == Status::kMovedToTcp) return real().shutdown(fd, SHUT_WR);  // our bytes go on TCP now
    if (s == Status::kPathFailed) {
      // Failing over: TCP's sending side is shut once the resend is out (mark_connection_back_on_tcp),
      // or here if that happened meanwhile; a shutdown never waits, as the kernel's does not.
      return ref.socket()->shut_when_on_tcp() ? real().shutdown(fd, SHUT_WR) : 0;
    }
    if (s == Status::kOk) return 0;
    errno = s == Status::kReset ? ENOTCONN : errno_of(s);
    return -1;
  });
}

int stream_take_error(const StreamRef& ref) noexcept {
  if (ref.prefixed() || ref.session() != nullptr) return 0;
  transport::RdmaStream* stream = ref;
  return stream->take_error();
}

void push_held_now(TrackedSocket* socket) noexcept {
  if (!socket->path_is(Path::kRdma)) return;
  if (transport::RdmaStream* stream = socket->own_stream()) stream->push();
}

int stream_readable_bytes(transport::RdmaStream* stream) noexcept {
  return keeping_errno_on_success([&] {
    uint64_t n = stream->readiness(false).bytes_readable;
    return n > INT32_MAX ? INT32_MAX : static_cast<int>(n);
  });
}

ssize_t kernel_io(int fd, const iovec* iov, int iovcnt, int flags, bool receiving) noexcept {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  return receiving ? real().recvmsg(fd, &m, flags) : real().sendmsg(fd, &m, flags);
}

ssize_t call_where_it_belongs(const StreamRef& began, int fd, const iovec* iov, int iovcnt, int msg_flags,
                              bool receiving) noexcept {
  // Counted while it lasts, as any call; a read is one (a relay's reader claims nothing more).
  StreamRef now = route_for_call(SocketHold(began.socket()), fd, receiving ? CallUse::kRead : CallUse::kAny);
  if (!now.ours()) return kernel_io(fd, iov, iovcnt, msg_flags, receiving);
  return receiving ? stream_recv(now, fd, iov, iovcnt, msg_flags) : stream_send(now, fd, iov, iovcnt, msg_flags);
}

}  // namespace tcp2rdma::preload
