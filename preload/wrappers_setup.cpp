// Socket creation, naming and connection setup. The application's descriptor is always the real kernel
// socket: these wrappers make the real call and then record what it did.
#include <cerrno>

#include "connection_policy.h"
#include "fd_table.h"
#include "interposed.h"
#include "socket_registry.h"

using tcp2rdma::preload::fd_table;
using tcp2rdma::preload::real;
using tcp2rdma::preload::SocketRole;

namespace {

int accept_common(int fd, int accepted) {
  // Only whether the listener is tracked is asked of the table; its state is not touched, since another
  // thread may be closing it. The new socket's family comes from the kernel.
  if (accepted < 0 || fd_table().find(fd) == nullptr) return accepted;
  int domain = 0;
  socklen_t len = sizeof domain;
  int saved_errno = errno;
  if (real().getsockopt(accepted, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0) {
    tcp2rdma::preload::track_new_socket(accepted, domain, SocketRole::kServer);
    tcp2rdma::preload::decide_connection(accepted, tcp2rdma::config::Role::kServer);
  }
  errno = saved_errno;
  return accepted;
}

}  // namespace

T2R_INTERPOSE int socket(int domain, int type, int protocol) {
  int fd = real().socket(domain, type, protocol);
  if (fd >= 0 && tcp2rdma::preload::is_tcp_candidate(domain, type, protocol)) {
    tcp2rdma::preload::track_new_socket(fd, domain, SocketRole::kUnknown);
  }
  return fd;
}

T2R_INTERPOSE int bind(int fd, const struct sockaddr* addr, socklen_t len) { return real().bind(fd, addr, len); }

T2R_INTERPOSE int listen(int fd, int backlog) {
  int rc = real().listen(fd, backlog);
  if (rc == 0) {
    if (auto* socket = fd_table().find(fd)) socket->set_role(SocketRole::kListener);
  }
  return rc;
}

T2R_INTERPOSE int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  return accept_common(fd, real().accept(fd, addr, len));
}

T2R_INTERPOSE int accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  return accept_common(fd, real().accept4(fd, addr, len, flags));
}

T2R_INTERPOSE int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  int rc = real().connect(fd, addr, len);
  // A non-blocking connect that is under way (EINPROGRESS) still makes this socket a client.
  if (rc == 0 || errno == EINPROGRESS) {
    if (auto* socket = fd_table().find(fd)) {
      socket->set_role(SocketRole::kClient);
      tcp2rdma::preload::decide_connection(fd, tcp2rdma::config::Role::kClient, addr, len);
    }
  }
  return rc;
}

T2R_INTERPOSE int shutdown(int fd, int how) { return real().shutdown(fd, how); }

T2R_INTERPOSE int getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  return real().getsockopt(fd, level, name, value, len);
}

T2R_INTERPOSE int setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  return real().setsockopt(fd, level, name, value, len);
}

T2R_INTERPOSE int getsockname(int fd, struct sockaddr* addr, socklen_t* len) {
  return real().getsockname(fd, addr, len);
}

T2R_INTERPOSE int getpeername(int fd, struct sockaddr* addr, socklen_t* len) {
  return real().getpeername(fd, addr, len);
}
