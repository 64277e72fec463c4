#include "data/socket_cork.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <cstring>

#include "data/stream_calls.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

bool cork_on_rdma(int fd, int level, int name, const void* value, socklen_t len) noexcept {
  // A short or missing value is the kernel's to refuse (EINVAL, EFAULT).
  if (level != IPPROTO_TCP || name != TCP_CORK || value == nullptr || len < sizeof(int)) return false;
  SocketHold socket = SocketHold::of(fd);
  if (!socket || !socket->path_is(Path::kRdma)) return false;
  bool on = *static_cast<const int*>(value) != 0;
  socket->corked.store(on);
  socket->cork_unsynced.store(true);
  // Looked at again after the stores: a move to TCP that began meanwhile either sees them and tells
  // the kernel, or is seen here, and the kernel gets this call after all.
  if (!socket->path_is(Path::kRdma)) return false;
  if (!on) push_held_now(socket.get());
  return true;
}

bool cork_as_set(int fd, int level, int name, void* value, socklen_t* len) noexcept {
  if (level != IPPROTO_TCP || name != TCP_CORK || value == nullptr || len == nullptr) return false;
  SocketHold socket = SocketHold::of(fd);
  if (!socket || !socket->cork_unsynced.load()) return false;
  int on = socket->corked.load() ? 1 : 0;
  socklen_t n = std::min<socklen_t>(*len, sizeof on);
  std::memcpy(value, &on, n);
  *len = n;
  return true;
}

}  // namespace tcp2rdma::preload
