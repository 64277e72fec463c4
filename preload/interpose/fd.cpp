// Descriptor lifetime and flags: close, dup and friends change which descriptors name a tracked socket.
#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstdarg>
#include <mutex>
#include <vector>

#include "data/stream_calls.h"
#include "libc/interposed.h"
#include "libc/kept_descriptors.h"
#include "own_calls.h"
#include "process/deferred_upgrade.h"
#include "readiness/epoll_sets.h"
#include "registry/fd_table.h"
#include "registry/socket_registry.h"
#include "registry/upgrade_session.h"

using tcp2rdma::preload::real;

namespace {

// Whether freeing fd's number must hold hold_descriptor_numbers (socket_registry.h): the path watcher
// uses only the numbers of connections on RDMA or failing over. No other close takes it: a close may
// block (SO_LINGER) and must not hold up the process's other closes. (After the session is settled,
// a connection not on RDMA never comes to it.)
bool watched_number(int fd) {
  auto socket = tcp2rdma::preload::SocketHold::of(fd);
  using tcp2rdma::preload::Path;
  return socket && (socket->path_is(Path::kRdma) || socket->path_is(Path::kFailingOver));
}

// fcntl's third argument is an int, a pointer or absent depending on cmd. On x86-64 all of them travel
// in one 64-bit register or stack slot, so reading a pointer and passing it on forwards every case.
int fcntl_common(int (*real_fcntl)(int, int, ...), int fd, int cmd, void* arg) {
  if (real_fcntl == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  int rc = real_fcntl(fd, cmd, arg);
  if (rc >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) tcp2rdma::preload::track_duplicate(fd, rc);
  if (rc >= 0 && cmd == F_SETFL) {
    if (auto socket = tcp2rdma::preload::SocketHold::of(fd)) {
      socket->nonblocking.store((reinterpret_cast<intptr_t>(arg) & O_NONBLOCK) != 0, std::memory_order_relaxed);
    }
  }
  return rc;
}

}  // namespace

T2R_INTERPOSE int close(int fd) {
  if (tcp2rdma::transport::OwnCalls::active()) {
    // The transport closing one of its own descriptors (own_calls.h): nothing of the application's.
    tcp2rdma::preload::TrackedSocket* stale = tcp2rdma::preload::untrack(fd);
    int rc = real().close(fd);
    if (stale != nullptr) stale->release();
    return rc;
  }
  if (tcp2rdma::preload::kept_from_application(fd)) {
    // One of the module's (libc/kept_descriptors.h): to the application, whose descriptor it never
    // was, a number that is not open.
    errno = EBADF;
    return -1;
  }
  // A number that names an upgrade a fork deferred is freed under the take-up lock, settle included
  // (process/deferred_upgrade.h): the fork service's thread may be about to take the upgrade up.
  std::unique_lock<std::mutex> take_ups = tcp2rdma::preload::hold_take_ups_while_freeing(fd, fd);
  {
    // A connection whose upgrade is still on TCP stays there (its TCP end must follow its bytes);
    // one in the middle of its switch is closed once the switch is over.
    tcp2rdma::preload::settle_for_freeing(fd);
    // The epoll registrations that stand in for an upgraded socket go with it (the kernel drops the
    // socket's own); and a closed epoll set takes its entries along.
    int saved_errno = errno;
    tcp2rdma::preload::epoll_forget_fd(fd);
    tcp2rdma::preload::epoll_forget_set(fd);
    errno = saved_errno;
  }
  // Out of the table before the number is free (socket_registry.h, untrack). Linux releases the
  // descriptor even when close reports an error (EINTR, EIO), so the entry goes either way.
  std::unique_lock<std::mutex> numbers;  // a watched number is freed under it (socket_registry.h)
  if (watched_number(fd)) numbers = tcp2rdma::preload::hold_descriptor_numbers();
  tcp2rdma::preload::TrackedSocket* socket = tcp2rdma::preload::untrack(fd);
  int rc = real().close(fd);
  if (numbers) numbers.unlock();
  if (take_ups) take_ups.unlock();
  if (socket != nullptr) {
    int saved_errno = errno;
    socket->release();  // with the last descriptor, the stream ends here (as before, after the close)
    errno = saved_errno;
  }
  return rc;
}

namespace {

// close_range over [first, last] less the module's kept descriptors (libc/kept_descriptors.h), piece
// by piece between them.
int close_range_around_kept(unsigned first, unsigned last, int flags) {
  for (;;) {
    int kept = tcp2rdma::preload::first_kept_in(first, last);
    if (kept < 0) return real().close_range(first, last, flags);
    if (static_cast<unsigned>(kept) > first) {
      if (int rc = real().close_range(first, static_cast<unsigned>(kept) - 1, flags); rc != 0) return rc;
    }
    if (static_cast<unsigned>(kept) == last) return 0;
    first = static_cast<unsigned>(kept) + 1;
  }
}

}  // namespace

T2R_INTERPOSE int close_range(unsigned int first, unsigned int last, int flags) {
  if (real().close_range == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  // Arguments the kernel refuses (EINVAL: nothing is closed), or only marking (CLOEXEC).
  if (first > last || (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)) != 0) {
    return real().close_range(first, last, flags);
  }
  if ((flags & CLOSE_RANGE_CLOEXEC) != 0) return close_range_around_kept(first, last, flags);
  // No descriptor lies beyond INT_MAX (the kernel's limit is far below it).
  auto as_fd = [](unsigned n) { return n > static_cast<unsigned>(INT_MAX) ? INT_MAX : static_cast<int>(n); };
  std::unique_lock<std::mutex> take_ups = tcp2rdma::preload::hold_take_ups_while_freeing(as_fd(first), as_fd(last));
  tcp2rdma::preload::for_each_tracked_fd(
      [](int fd, tcp2rdma::preload::SocketHold&) { tcp2rdma::preload::settle_for_freeing(fd); }, as_fd(first),
      as_fd(last));
  std::vector<tcp2rdma::preload::TrackedSocket*> sockets;
  int rc = 0;
  {
    auto numbers = tcp2rdma::preload::hold_descriptor_numbers();  // socket_registry.h
    sockets = tcp2rdma::preload::untrack_range(first, last);
    rc = close_range_around_kept(first, last, flags);
  }
  if (take_ups) take_ups.unlock();
  int saved_errno = errno;
  for (auto* socket : sockets) socket->release();
  errno = saved_errno;
  return rc;
}

T2R_INTERPOSE void closefrom(int lowfd) {
  // glibc's closefrom calls the kernel's close_range itself, past our wrapper: the same work here.
  if (lowfd < 0) lowfd = 0;
  if (close_range(static_cast<unsigned>(lowfd), ~0U, 0) == 0) return;
  if (real().closefrom != nullptr) real().closefrom(lowfd);  // no close_range (ENOSYS): libc's own way
}

T2R_INTERPOSE int dup(int fd) {
  int rc = real().dup(fd);
  if (rc >= 0) tcp2rdma::preload::track_duplicate(fd, rc);
  return rc;
}

// dup2 and dup3 onto a watched number free it: under hold_descriptor_numbers (socket_registry.h) until
// the table says what the number names now.
template <typename Dup>
int dup_onto(int fd, int fd2, Dup dup) {
  std::unique_lock<std::mutex> take_ups;  // as in close()
  if (fd != fd2) take_ups = tcp2rdma::preload::hold_take_ups_while_freeing(fd2, fd2);
  if (fd != fd2) tcp2rdma::preload::settle_for_freeing(fd2);  // dup2 closes fd2 first
  std::unique_lock<std::mutex> numbers;
  if (fd != fd2 && watched_number(fd2)) numbers = tcp2rdma::preload::hold_descriptor_numbers();
  int rc = dup();
  if (rc >= 0) tcp2rdma::preload::track_duplicate(fd, rc);
  return rc;
}

T2R_INTERPOSE int dup2(int fd, int fd2) {
  return dup_onto(fd, fd2, [&] { return real().dup2(fd, fd2); });
}

T2R_INTERPOSE int dup3(int fd, int fd2, int flags) {
  return dup_onto(fd, fd2, [&] { return real().dup3(fd, fd2, flags); });
}

T2R_INTERPOSE int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return fcntl_common(real().fcntl, fd, cmd, arg);
}

T2R_INTERPOSE int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return fcntl_common(real().fcntl64, fd, cmd, arg);
}

T2R_INTERPOSE int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);  // same register argument as for fcntl
  va_end(ap);
  // FIONREAD on an upgraded socket: the bytes waiting in its stream, not the (empty) kernel queue.
  if (request == FIONREAD && arg != nullptr) {
    auto s = tcp2rdma::preload::route_for_call(fd, tcp2rdma::preload::CallUse::kRead);
    // A stream whose bytes a relay takes (back_to_tcp/read_relay.h) counts its queue's, as a prefix does.
    bool relayed = s != nullptr && s.socket()->prefix.present();
    if (s != nullptr && !relayed) {
      *static_cast<int*>(arg) = tcp2rdma::preload::stream_readable_bytes(s);
      return 0;
    }
    if (relayed) {
      size_t n = s.socket()->prefix.size();
      *static_cast<int*>(arg) = n > INT32_MAX ? INT32_MAX : static_cast<int>(n);
      return 0;
    }
    if (s.prefixed()) {
      // Back on TCP: the bytes kept from the stream come before the kernel's.
      int queued = 0;
      if (real().ioctl(fd, FIONREAD, &queued) != 0) return -1;
      size_t n = s.socket()->prefix.size() + static_cast<size_t>(queued);
      *static_cast<int*>(arg) = n > INT32_MAX ? INT32_MAX : static_cast<int>(n);
      return 0;
    }
  }
  int rc = real().ioctl(fd, request, arg);
  if (rc == 0 && request == FIONBIO && arg != nullptr) {
    if (auto socket = tcp2rdma::preload::SocketHold::of(fd)) {
      socket->nonblocking.store(*static_cast<int*>(arg) != 0, std::memory_order_relaxed);
    }
  }
  return rc;
}
