// Reads and writes on a connection that is back on TCP after RDMA (back_to_tcp/move_back.h): the peer's
// bytes kept from the stream (the socket's prefix) come before the kernel's.
#include <sched.h>
#include <sys/socket.h>

#include <vector>

#include "back_to_tcp/move_back.h"
#include "data/stream_calls.h"
#include "rdma_stream.h"
#include "registry/tracked_socket.h"
#include "util/iovecs.h"

namespace tcp2rdma::preload {

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
  while (socket->being_moved()) sched_yield();
  transport::RdmaStream* stream = ref;
  if (stream != nullptr && stream->moved()) complete_move_back(socket, fd);
  if (receiving && socket->prefix.present()) return prefix_recv(socket, fd, iov, iovcnt, msg_flags);
  return kernel_io(fd, iov, iovcnt, msg_flags, receiving);
}

}  // namespace tcp2rdma::preload
