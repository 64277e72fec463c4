// The application's reads and writes on a connection whose upgrade is under way and still on TCP.
// Each one is a kernel call that does not block, made under the session's gate and counted, so that
// the switch can freeze the counts between two of them; a caller that would block waits outside the
// gate, on the socket and on the session's wake fd together. When the connection moves meanwhile, the
// call goes on where it now belongs (the stream, or TCP for good), after the bytes it already moved.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <optional>
#include <vector>

#include "data/stream_calls.h"
#include "libc/real_calls.h"
#include "registry/upgrade_session.h"
#include "util/iovecs.h"
#include "util/signal_restart.h"

namespace tcp2rdma::preload {
namespace {

bool would_block(int fd, int msg_flags) {
  if (msg_flags & MSG_DONTWAIT) return true;
  int fl = real().fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

// The iovecs of a call after the bytes it has already moved. Most calls move theirs in one kernel
// call, so the copy is made only once a call has moved something and goes on.
class Remaining {
 public:
  Remaining(const iovec* iov, int iovcnt) : iov_(iov), iovcnt_(iovcnt) {}
  const iovec* iov() const { return rest_.empty() ? iov_ : rest_.data(); }
  int iovcnt() const { return rest_.empty() ? iovcnt_ : static_cast<int>(rest_.size()); }
  void skip(size_t done) { rest_ = iov_after(iov_, iovcnt_, done); }

 private:
  const iovec* iov_;
  int iovcnt_;
  std::vector<iovec> rest_;
};

// Sleeps until the socket may be ready for `events` or the connection moves. False when a signal
// handler ran meanwhile and the call is to fail with EINTR (signal_restart.h).
// Without a wake fd (no descriptor to be had) it sleeps in short slices and the caller looks again.
bool wait_for(int fd, short events, const UpgradeSession& session) {
  pollfd p[2] = {{fd, events, 0}, {session.wake_fd(), POLLIN, 0}};
  int ms = UpgradeSession::poll_ms_for(p[1].fd, -1);
  return real().poll(p, 2, ms) >= 0 || errno != EINTR || !interrupted_call_fails();
}

// A kernel call moved nothing, with `error`: what the application's call returns now (the bytes it
// moved before, or -1 and errno), or nothing when it is to wait for the socket, or for the connection
// to move, and try again. A blocking call interrupted by a signal reports EINTR as the kernel's would.
std::optional<ssize_t> when_stuck(int fd, int msg_flags, short events, const UpgradeSession& session, size_t done,
                                  int error) {
  auto result = [done](int e) -> ssize_t {
    if (done > 0) return static_cast<ssize_t>(done);
    errno = e;
    return -1;
  };
  if (error != EAGAIN && error != EWOULDBLOCK) return result(error);
  if (would_block(fd, msg_flags)) return result(EAGAIN);
  if (!wait_for(fd, events, session)) return result(EINTR);
  return std::nullopt;
}

}  // namespace

ssize_t session_recv(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  UpgradeSession* session = ref.session();
  const size_t want = iov_total(iov, iovcnt);
  const bool peek = msg_flags & MSG_PEEK;
  // MSG_WAITALL must not wait on TCP for bytes that will come over RDMA: this loop waits instead.
  const bool wait_all = (msg_flags & MSG_WAITALL) && !peek;
  const int kernel_flags = (msg_flags & ~MSG_WAITALL) | MSG_DONTWAIT;
  size_t done = 0;
  Remaining rest(iov, iovcnt);
  for (;;) {
    ssize_t r = 0;
    int error = 0;
    bool on_tcp = session->run_on_tcp([&](uint64_t&, uint64_t& received) {
      r = kernel_io(fd, rest.iov(), rest.iovcnt(), kernel_flags, true);
      error = errno;
      if (r > 0 && !peek) received += static_cast<uint64_t>(r);
    });
    if (!on_tcp) {
      if (done > 0 && !wait_all) return static_cast<ssize_t>(done);
      ssize_t more = call_where_it_belongs(ref, fd, rest.iov(), rest.iovcnt(), msg_flags, true);
      if (more < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
      return static_cast<ssize_t>(done + static_cast<size_t>(more));
    }
    if (r > 0) {
      done += static_cast<size_t>(r);
      if (!wait_all || done == want) return static_cast<ssize_t>(done);
      rest.skip(done);
      continue;
    }
    if (r == 0 || want == 0) return static_cast<ssize_t>(done);  // the end of the stream
    if (auto result = when_stuck(fd, msg_flags, POLLIN, *session, done, error)) return *result;
  }
}

ssize_t session_send(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  UpgradeSession* session = ref.session();
  const size_t want = iov_total(iov, iovcnt);
  const int kernel_flags = msg_flags | MSG_DONTWAIT;
  size_t done = 0;
  Remaining rest(iov, iovcnt);
  for (;;) {
    ssize_t r = 0;
    int error = 0;
    bool on_tcp = session->run_on_tcp([&](uint64_t& sent, uint64_t&) {
      r = kernel_io(fd, rest.iov(), rest.iovcnt(), kernel_flags, false);
      error = errno;
      if (r > 0) sent += static_cast<uint64_t>(r);
    });
    if (!on_tcp) {
      ssize_t more = call_where_it_belongs(ref, fd, rest.iov(), rest.iovcnt(), msg_flags, false);
      if (more < 0) return done > 0 ? static_cast<ssize_t>(done) : -1;
      return static_cast<ssize_t>(done + static_cast<size_t>(more));
    }
    if (r >= 0) {
      done += static_cast<size_t>(r);
      // A blocking send takes every byte, as the kernel's does; a non-blocking one what fits.
      if (done == want || would_block(fd, msg_flags)) return static_cast<ssize_t>(done);
      rest.skip(done);
      continue;
    }
    if (auto result = when_stuck(fd, msg_flags, POLLOUT, *session, done, error)) return *result;
  }
}

}  // namespace tcp2rdma::preload
