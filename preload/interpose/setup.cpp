// Socket creation, naming and connection setup. The application's descriptor is always the real kernel
// socket: these wrappers make the real call and then record what it did.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <cstdio>

#include "data/socket_cork.h"
#include "data/stream_calls.h"
#include "libc/interposed.h"
#include "listener/listener_state.h"
#include "listener/prefork_listeners.h"
#include "listener/rdma_listener.h"
#include "registry/connection_policy.h"
#include "registry/fd_table.h"
#include "registry/socket_registry.h"
#include "registry/upgrade_session.h"
#include "upgrade/upgrade.h"
#include "util/saved_errno.h"

using tcp2rdma::preload::fd_table;
using tcp2rdma::preload::Path;
using tcp2rdma::preload::real;
using tcp2rdma::preload::SocketRole;

namespace {

using tcp2rdma::config::Role;
using tcp2rdma::config::Transport;

// Before the real accept: this process now accepts on the listener (a fork will not hand its RDMA
// listener on), and makes the RDMA listener here if an ancestor handed it on (pre-fork servers).
void before_accept(int fd) {
  auto listener = tcp2rdma::preload::SocketHold::of(fd);
  if (!listener) return;
  tcp2rdma::preload::SavedErrno keep_errno;
  if (auto* state = tcp2rdma::preload::listener_state(listener.get())) {
    state->accept_generation.store(tcp2rdma::preload::fork_generation());
  }
  tcp2rdma::preload::claim_rdma_listener(fd, listener.get());
}

int accept_common(int fd, int accepted) {
  // The listener's state is reached through the table; the new socket's family comes from the kernel.
  if (accepted < 0) return accepted;
  auto listener = tcp2rdma::preload::SocketHold::of(fd);  // through the upgrade, which may wait seconds
  if (!listener) return accepted;
  int domain = 0;
  socklen_t len = sizeof domain;
  int saved_errno = errno;
  if (real().getsockopt(accepted, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0) {
    tcp2rdma::preload::track_new_socket(accepted, domain, SocketRole::kServer);
    auto accepted_socket = tcp2rdma::preload::SocketHold::of(accepted);
    if (accepted_socket) accepted_socket->forks.note_accepted_from(listener.get());  // for a forked child's return
    auto decision = tcp2rdma::preload::decide_connection(accepted, Role::kServer, nullptr, 0, accepted_socket.get());
    // accept() returns at TCP speed with upgrade: background; the connection moves to RDMA beside
    // the application.
    if (!tcp2rdma::preload::upgrade_connection(accepted, Role::kServer, listener.get(), decision)) {
      // Broken half-way (records exchanged, then a mismatch), or RDMA was required and could not be
      // had: never hand out such a connection. The client reads a reset (linger 0), not an end.
      linger reset{1, 0};
      real().setsockopt(accepted, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      tcp2rdma::preload::track_close(accepted);
      real().close(accepted);
      errno = ECONNABORTED;
      return -1;
    }
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
  auto socket = tcp2rdma::preload::SocketHold::of(fd);
  if (!socket) return real().listen(fd, backlog);
  int saved_errno = errno;
  bool first = socket->role() != SocketRole::kListener &&
               tcp2rdma::preload::process_rules().may_select_rdma(Role::kServer);
  // A tcp2rdma client asks for its RDMA connection right after its TCP connect completes, and that
  // can happen the moment the real listen() returns: so the RDMA listener comes first whenever the
  // port is already known. (A request that finds no RDMA listener is rejected, and that connection
  // stays TCP.) An unbound socket gets its port from listen() itself, and no client can know that
  // port before listen() has returned. A listener no rule can select for RDMA by its address and
  // port (a test harness's, an admin port) gets no RDMA side at all.
  bool bound = false;
  bool wanted = first && tcp2rdma::preload::rdma_wanted_at(fd, &bound);
  bool early = wanted && bound;
  if (early) tcp2rdma::preload::listen_rdma(fd, socket.get());
  errno = saved_errno;
  int rc = real().listen(fd, backlog);
  saved_errno = errno;
  if (rc == 0) {
    socket->set_role(SocketRole::kListener);
    if (wanted && !bound && tcp2rdma::preload::rdma_wanted_at(fd, &bound)) {
      tcp2rdma::preload::listen_rdma(fd, socket.get());
    }
  } else if (early) {
    tcp2rdma::preload::drop_rdma_listener(socket.get());
  }
  errno = saved_errno;
  return rc;
}

T2R_INTERPOSE int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  before_accept(fd);
  return accept_common(fd, real().accept(fd, addr, len));
}

T2R_INTERPOSE int accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  before_accept(fd);
  return accept_common(fd, real().accept4(fd, addr, len, flags));
}

T2R_INTERPOSE int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  int rc = real().connect(fd, addr, len);
  // A non-blocking connect that is under way (EINPROGRESS) still makes this socket a client.
  if (rc != 0 && errno != EINPROGRESS) return rc;
  auto socket = tcp2rdma::preload::SocketHold::of(fd);
  if (!socket) return rc;
  // Linux answers a repeated connect() on a socket whose non-blocking connect has completed with 0,
  // once (hiredis, so redis-cli and redis-benchmark, learn of the completion that way): that connection
  // was decided at the first call, and is upgraded now if that is still pending, never a second time.
  if (rc == 0 && socket->connect_in_progress.exchange(false)) {
    if (tcp2rdma::preload::finish_pending_upgrade(fd, socket.get())) return 0;
    socket->pending_error.store(0);  // reported here, as a blocking connect reports it
    errno = ECONNRESET;
    return -1;
  }
  int saved_errno = errno;
  socket->set_role(SocketRole::kClient);
  auto decision = tcp2rdma::preload::decide_connection(fd, Role::kClient, addr, len, socket.get());
  if (rc != 0) socket->connect_in_progress.store(true);
  if (rc != 0 && decision.options->transport == Transport::kRdma) {
    // Under way (EINPROGRESS): the upgrade starts once the connection is up, at the application's next
    // call on it (finish_pending_upgrade).
    socket->pending_decision = decision;
    socket->move_path(Path::kTcp, Path::kUpgradePending);
  } else if (!tcp2rdma::preload::upgrade_connection(fd, Role::kClient, nullptr, decision, addr, len)) {
    real().shutdown(fd, SHUT_RDWR);
    errno = ECONNRESET;
    return -1;
  }
  errno = saved_errno;
  return rc;
}

T2R_INTERPOSE int shutdown(int fd, int how) {
  // A server that ends its sending side while its connection's upgrade is still on TCP: the kernel
  // sends the end now, and the switch goes on (its HELLO says the TCP end marks its last byte).
  if (auto socket = tcp2rdma::preload::SocketHold::of(fd); socket && how == SHUT_WR && socket->role() == SocketRole::kServer) {
    if (auto* session = socket->active_session()) {
      int rc = 0, error = 0;
      if (session->end_sending_on_tcp([&] {
            rc = real().shutdown(fd, how);
            error = errno;
            return rc == 0;
          })) {
        errno = error;
        return rc;
      }
    }
  }
  // Any other shutdown of a connection still on TCP keeps it there: a client could write no record
  // after its end, and a read side shut down could not be drained. Nor does it start a return.
  tcp2rdma::preload::settle_session(fd);
  if (auto s = tcp2rdma::preload::route_for_call(fd, tcp2rdma::preload::CallUse::kEnd)) {
    return tcp2rdma::preload::stream_shutdown(s, fd, how);
  }
  return real().shutdown(fd, how);
}

T2R_INTERPOSE int getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  // SO_ERROR is how a program learns that its non-blocking connect completed: the moment to upgrade.
  if (level == SOL_SOCKET && name == SO_ERROR) {
    if (auto socket = tcp2rdma::preload::SocketHold::of(fd)) {
      int rc = real().getsockopt(fd, level, name, value, len);
      if (rc == 0 && *static_cast<int*>(value) == 0) {
        if (socket->upgrade_pending()) tcp2rdma::preload::finish_pending_upgrade(fd, socket.get());
        if (int error = socket->pending_error.exchange(0); error != 0) *static_cast<int*>(value) = error;
        if (auto s = tcp2rdma::preload::route_for_call(fd); s && *static_cast<int*>(value) == 0) {
          *static_cast<int*>(value) = tcp2rdma::preload::stream_take_error(s);
        }
      }
      return rc;
    }
  }
  if (tcp2rdma::preload::cork_as_set(fd, level, name, value, len)) return 0;
  return real().getsockopt(fd, level, name, value, len);
}

T2R_INTERPOSE int setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  if (tcp2rdma::preload::cork_on_rdma(fd, level, name, value, len)) return 0;
  int rc = real().setsockopt(fd, level, name, value, len);
  // The kernel socket takes SO_LINGER too (its own close then behaves alike); the stream's end follows
  // it at the last close.
  if (rc == 0 && level == SOL_SOCKET && name == SO_LINGER && len >= static_cast<socklen_t>(sizeof(linger))) {
    if (auto socket = tcp2rdma::preload::SocketHold::of(fd)) {
      const auto* l = static_cast<const linger*>(value);
      socket->linger_seconds.store(l->l_onoff ? l->l_linger : -1);
    }
  }
  // TCP_CORK holds writes back on the stream too; its removal, or TCP_NODELAY set, sends what is held,
  // as the kernel pushes its pending segment then.
  bool cork = level == IPPROTO_TCP && name == TCP_CORK, nodelay = level == IPPROTO_TCP && name == TCP_NODELAY;
  if (rc == 0 && (cork || nodelay) && len >= static_cast<socklen_t>(sizeof(int))) {
    if (auto socket = tcp2rdma::preload::SocketHold::of(fd)) {
      bool on = *static_cast<const int*>(value) != 0;
      if (cork) socket->corked.store(on);
      if ((cork && !on) || (nodelay && on)) tcp2rdma::preload::push_held_now(socket.get());
    }
  }
  return rc;
}

T2R_INTERPOSE int getsockname(int fd, struct sockaddr* addr, socklen_t* len) {
  return real().getsockname(fd, addr, len);
}

T2R_INTERPOSE int getpeername(int fd, struct sockaddr* addr, socklen_t* len) {
  return real().getpeername(fd, addr, len);
}
