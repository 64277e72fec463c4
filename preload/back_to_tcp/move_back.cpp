#include "back_to_tcp/move_back.h"

#include <sched.h>
#include <sys/socket.h>

#include <chrono>
#include <vector>

#include "readiness/epoll_sets.h"
#include "registry/fd_table.h"
#include "upgrade/upgrade_session.h"
#include "util/iovecs.h"
#include "util/log.h"
#include "rdma_stream.h"
#include "libc/real_calls.h"
#include "route/stream_calls.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {
namespace {

const char* label_of(const TrackedSocket* socket) {
  UpgradeSession* session = socket->session();
  return session != nullptr ? session->label() : "connection";
}

}  // namespace

bool move_back(TrackedSocket* socket, transport::RdmaStream* stream, int fd, const char* why) noexcept {
  int saved_errno = errno;
  socket->moving_back.store(true, std::memory_order_release);
  std::vector<uint8_t> unread;
  bool peer_ended = false;
  auto started = std::chrono::steady_clock::now();
  transport::Status s = stream->move_to_tcp(&unread, &peer_ended);
  if (s == transport::Status::kOk && !socket->prefix.set(unread, peer_ended)) {
    // No memory for the prefix: the bytes go back into the stream, which serves them before telling
    // the readers to go on on TCP; the connection stays this process's (a child's copy fails).
    log_line("%s: stays on rdma at %s: no memory for the %zu bytes to keep", label_of(socket), why, unread.size());
    stream->set_unread_prefix(std::move(unread));
    s = transport::Status::kResources;
  } else if (s == transport::Status::kOk) {
    // The prefix is set before the mark: a call that sees the socket back on TCP must find it.
    size_t n = unread.size();
    complete_move_back(socket, fd, /*by_mover=*/true);
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
    log_line("%s: back on tcp before %s (%zu bytes of the peer's kept to read first%s; %lld us)", label_of(socket),
             why, n, peer_ended ? ", then its end" : "", static_cast<long long>(us.count()));
  } else {
    log_line("%s: stays on rdma at %s: the peer did not answer the move to tcp (%s)", label_of(socket), why,
             transport::to_string(s));
  }
  socket->moving_back.store(false, std::memory_order_release);
  errno = saved_errno;
  return s == transport::Status::kOk;
}

void move_streams_back(const char* why) noexcept {
  int saved_errno = errno;
  // Every marker first, then each move's end: the peers answer together, and a process with many
  // connections waits about one round trip, not one per connection. From the first step on, the
  // socket is marked as moving: another thread's call that meets the peer's marker waits for this
  // one to finish the move (held: the socket stays while we work on it, whatever other threads close).
  std::vector<std::pair<int, SocketHold>> moving;
  int end = fd_table().high_water();
  for (int fd = 0; fd < end; ++fd) {
    SocketHold socket = SocketHold::of(fd);
    transport::RdmaStream* stream = socket ? socket->stream() : nullptr;
    if (stream == nullptr || !socket->follows_fork.load(std::memory_order_relaxed)) continue;
    socket->moving_back.store(true, std::memory_order_release);
    stream->start_move_to_tcp();
    moving.emplace_back(fd, std::move(socket));
  }
  for (auto& [fd, socket] : moving) {
    // A dup'd descriptor finds its socket back on TCP already (stream() is null).
    transport::RdmaStream* stream = socket->stream();
    if (stream != nullptr && fd_table().find(fd) == socket.get()) {
      move_back(socket.get(), stream, fd, why);
    } else {
      socket->moving_back.store(false, std::memory_order_release);
    }
  }
  errno = saved_errno;
}

bool settle_move_back(TrackedSocket* socket, int fd, bool by_mover) noexcept {
  // Another thread is moving it (a fork): it finishes itself, once the prefix is set.
  if (!by_mover && socket->moving_back.load(std::memory_order_acquire)) return false;
  if (!socket->mark_back_on_tcp()) return false;
  int saved_errno = errno;
  transport::RdmaStream* stream = socket->own_stream();
  // The stream's end (our shutdown(SHUT_WR) went onto it) is the TCP socket's now.
  if (stream != nullptr && stream->write_was_shut()) real().shutdown(fd, SHUT_WR);
  // The side that moved says so itself, with what it kept (move_back).
  if (!by_mover) log_line("%s: back on tcp (the peer moved)", label_of(socket));
  errno = saved_errno;
  return true;
}

void complete_move_back(TrackedSocket* socket, int fd, bool by_mover) noexcept {
  if (settle_move_back(socket, fd, by_mover)) epoll_move_back(socket);
}

ssize_t prefix_recv(TrackedSocket* socket, int fd, const iovec* iov, int iovcnt, int msg_flags) noexcept {
  const bool peek = msg_flags & MSG_PEEK;
  bool at_end = false;
  size_t got = socket->prefix.take(iov, iovcnt, peek, &at_end);
  if (at_end) return static_cast<ssize_t>(got);  // the peer's end comes after its last bytes
  if (got == 0) return kernel_io(fd, iov, iovcnt, msg_flags, true);  // emptied by another call meanwhile
  if (!(msg_flags & MSG_WAITALL) || peek || got == iov_total(iov, iovcnt)) return static_cast<ssize_t>(got);
  // MSG_WAITALL: the rest from the kernel, as one call would have waited for it.
  std::vector<iovec> rest = iov_after(iov, iovcnt, got);
  ssize_t more = kernel_io(fd, rest.data(), static_cast<int>(rest.size()), msg_flags, true);
  return static_cast<ssize_t>(got) + (more > 0 ? more : 0);
}

ssize_t tcp_after_move(const StreamRef& ref, int fd, const iovec* iov, int iovcnt, int msg_flags,
                       bool receiving) noexcept {
  TrackedSocket* socket = ref.socket();
  // Another thread moving the connection (a fork) sets the prefix right after taking the bytes, then
  // finishes the move: wait for it, so that no read goes to the kernel before the prefix.
  while (socket->moving_back.load(std::memory_order_acquire)) sched_yield();
  transport::RdmaStream* stream = ref;
  if (stream != nullptr && stream->moved()) complete_move_back(socket, fd);
  if (receiving && socket->prefix.present()) return prefix_recv(socket, fd, iov, iovcnt, msg_flags);
  return kernel_io(fd, iov, iovcnt, msg_flags, receiving);
}

}  // namespace tcp2rdma::preload
