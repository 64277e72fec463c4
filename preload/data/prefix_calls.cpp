// Reads and writes on a connection that is back on TCP after RDMA (back_to_tcp/move_back.h): the peer's
// bytes kept from the stream (the socket's prefix) come before the kernel's. A relay's queue
// (back_to_tcp/read_relay.h) is read the same way, waiting for its bytes while it is fed.
#include <sched.h>
#include <sys/socket.h>

#include <cerrno>
#include <vector>

#include "back_to_tcp/move_back.h"
#include "data/stream_calls.h"
#include "rdma_stream.h"
#include "registry/tracked_socket.h"
#include "util/iovecs.h"
#include "util/signal_restart.h"

namespace tcp2rdma::preload {

namespace {

// How long a reader waits on a relay's bell before it looks whether the process that feeds the queue
// is still there (a parent killed by a signal cannot say so).
constexpr int kFeederLookMs = 1000;

// A read found the relay's queue empty and still fed: waits for its bell. 0: look again; -1 with
// errno: EAGAIN (non-blocking) or EINTR (a signal handler the call does not restart after).
int await_relay(TcpPrefix& prefix, bool nonblocking) {
  if (nonblocking) {
    errno = EAGAIN;
    return -1;
  }
  int woke = prefix.wait_for_bytes(kFeederLookMs);
  if (woke < 0 && errno == EINTR && interrupted_call_fails()) return -1;
  if (woke == 0 && prefix.feeder_gone()) prefix.finish(TcpPrefix::Then::kError, ECONNRESET);
  return 0;
}

}  // namespace

ssize_t prefix_recv(TrackedSocket* socket, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  const bool peek = msg_flags & MSG_PEEK;
  const bool nonblocking = (msg_flags & MSG_DONTWAIT) || socket->nonblocking.load(std::memory_order_relaxed);
  const size_t wanted = iov_total(iov, iovcnt);
  std::vector<iovec> rest;
  size_t got = 0;
  for (;;) {
    bool at_end = false;
    const iovec* into = iov;
    int count = iovcnt;
    if (got > 0) {
      rest = iov_after(iov, iovcnt, got);
      into = rest.data();
      count = static_cast<int>(rest.size());
    }
    got += socket->prefix.take(into, count, peek, &at_end);
    if (at_end) return static_cast<ssize_t>(got);  // the peer's end comes after its last bytes
    // One take answers a read, unless MSG_WAITALL asks for more (a peek looks once).
    bool done = got == wanted || (got > 0 && (!(msg_flags & MSG_WAITALL) || peek));
    if (done) return static_cast<ssize_t>(got);
    if (socket->prefix.fed()) {
      if (got == 0 && await_relay(socket->prefix, nonblocking) < 0) return -1;
      if (got > 0 && nonblocking) return static_cast<ssize_t>(got);
      if (got > 0) (void)await_relay(socket->prefix, false);  // MSG_WAITALL waits for the rest
      continue;
    }
    if (got == 0) {
      if (int error = socket->prefix.take_error(); error != 0) {
        errno = error;
        return -1;
      }
    }
    if (socket->prefix.present() && got == 0) continue;  // fed a moment ago: its last bytes are there
    // The kernel's bytes follow (emptied by another call meanwhile, or the rest for MSG_WAITALL).
    if (got == 0) return kernel_io(fd, iov, iovcnt, msg_flags, true);
    rest = iov_after(iov, iovcnt, got);
    ssize_t more = kernel_io(fd, rest.data(), static_cast<int>(rest.size()), msg_flags, true);
    return static_cast<ssize_t>(got) + (more > 0 ? more : 0);
  }
}

ssize_t tcp_after_move(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags,
                       bool receiving) noexcept {
  TrackedSocket* socket = ref.socket();
  // Another thread moving the connection (a fork) sets the prefix right after taking the bytes, then
  // finishes the move: wait for it, so that no read goes to the kernel before the prefix.
  while (socket->being_moved()) sched_yield();
  transport::RdmaStream* stream = ref;
  if (stream != nullptr && stream->moved()) complete_move_back(socket, fd);
  // Moved for good: where every call goes now (counted while a return is planned: a write that goes
  // on in the kernel's send must not have a return start under it). Half-moved (the peer's marker
  // not here yet), this side's writes go on TCP while its reads stay on the stream.
  if (socket->back_on_tcp()) return call_where_it_belongs(ref, fd, iov, iovcnt, msg_flags, receiving);
  if (receiving && socket->prefix.present()) return prefix_recv(socket, fd, iov, iovcnt, msg_flags);
  return kernel_io(fd, iov, iovcnt, msg_flags, receiving);
}

}  // namespace tcp2rdma::preload
