#include "upgrade/return_to_rdma.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "libc/real_calls.h"
#include "listener/rdma_listener.h"
#include "readiness/epoll_sets.h"
#include "rdma_stream.h"
#include "registry/connection_path.h"
#include "registry/lent_streams.h"
#include "upgrade/background.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;

// The port of a socket address (host order), and whether the address is a wildcard.
uint16_t port_of(const sockaddr_storage& a, bool* wildcard) {
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    *wildcard = in->sin_addr.s_addr == htonl(INADDR_ANY);
    return ntohs(in->sin_port);
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  *wildcard = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
  return ntohs(in6->sin6_port);
}

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  }
  return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
}

// The listener of this process that accepts connections like the server connection fd (its port, its
// address or a wildcard), held; empty when the process has none with an RDMA listener beside it (it
// closed it, or never had one: PostgreSQL's backends close the postmaster's). No request could come.
SocketHold listener_for(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return {};
  bool unused = false;
  uint16_t port = port_of(local, &unused);
  int end = fd_table().high_water();
  for (int candidate = 0; candidate < end; ++candidate) {
    SocketHold socket = SocketHold::of(candidate);
    if (!socket || socket->role() != SocketRole::kListener) continue;
    sockaddr_storage bound{};
    len = sizeof bound;
    if (real().getsockname(candidate, reinterpret_cast<sockaddr*>(&bound), &len) != 0) continue;
    bool wildcard = false;
    if (port_of(bound, &wildcard) != port) continue;
    // An IPv6 wildcard listener takes IPv4 connections too (as IPv4-mapped addresses).
    if (!wildcard && !same_address(bound, local)) continue;
    if (surely_without_rdma(socket.get())) continue;
    return socket;
  }
  return {};
}

// Whether the kernel's TCP connection is still open both ways: one whose either side ended (a
// shutdown, the peer's FIN) stays TCP to its end.
bool tcp_established(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  return real().getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_ESTABLISHED;
}

// Never again for this connection: the epoll registrations kept for a return are forgotten (an
// epoll_wait on their set takes the module's path while it holds any).
void never(TrackedSocket* socket, int fd) {
  socket->returns.done();
  epoll_move_pending(fd, /*upgraded=*/false);
}

// The same, and the log says why.
void give_up(TrackedSocket* socket, int fd, const char* why) {
  never(socket, fd);
  log_line("%s: stays on tcp for good (%s)", connection_label(socket), why);
}

}  // namespace

void try_return(TrackedSocket* socket, int fd) noexcept {
  auto now = Clock::now();
  config::Decision decision{};
  if (!socket->returns.take_due(now, &decision)) return;
  SavedErrno keep_errno;
  // Another process may hold it (a fork, a spawn since it was made, or a child it was lent to): a
  // switch here would split its bytes between the two.
  if (socket->shared() || (socket->serial() != 0 && is_lent(socket->serial()))) {
    give_up(socket, fd, "another process may hold the connection");
    return;
  }
  // Another thread of the application is inside a kernel call on it (a blocked read, a poll): it
  // would take the switch's bytes for the peer's, or sleep on a socket that no longer carries the
  // connection. Looked at again later (start_return_session looks once more, after its session is
  // in place, for a call that began meanwhile).
  if (socket->tcp_calls() != 0) {
    socket->returns.failed(now);
    return;
  }
  if (!tcp_established(fd)) {
    never(socket, fd);  // its end is TCP's: nothing to say
    return;
  }
  // The peer's bytes from the old stream are read first: the new one's prefix holds only the TCP tail.
  if (socket->prefix.present()) {
    socket->returns.failed(now, /*double_wait=*/false);
    return;
  }
  SocketHold listener;
  config::Role role = config::Role::kClient;
  if (socket->role() == SocketRole::kServer) {
    role = config::Role::kServer;
    listener = listener_for(fd);
    if (!listener) {
      give_up(socket, fd, "this process has no listener on its port to hear the client's request");
      return;
    }
  } else if (socket->role() != SocketRole::kClient) {
    never(socket, fd);
    return;
  }
  if (!upgrade_beside(fd, role, listener.get(), decision, SessionStart::kReturn)) {
    socket->returns.failed(now, /*double_wait=*/false);
  }
}

void conclude_return(TrackedSocket* socket, const UpgradeOutcome& outcome, const transport::RdmaStream* stream,
                     char* words, size_t size) noexcept {
  const char* colon = outcome.detail.empty() ? "" : ": ";
  if (outcome.upgraded && stream != nullptr) {
    socket->returns.done();
    std::snprintf(words, size,
                  "back on rdma (receive ring %llu KiB, the peer's %llu KiB; its upgrade %u; setup %ld ms, switch "
                  "%ld ms)",
                  static_cast<unsigned long long>(stream->ring_size() >> 10),
                  static_cast<unsigned long long>(stream->peer_ring_size() >> 10), socket->upgrades(),
                  outcome.setup_ms, outcome.switch_ms);
    return;
  }
  if (!outcome.connection_usable) {
    socket->returns.done();
    std::snprintf(words, size, "reset: the switch back to rdma broke (%s%s%s)", outcome.why, colon,
                  outcome.detail.c_str());
    return;
  }
  socket->returns.failed(Clock::now());
  std::snprintf(words, size, "still on tcp (%s%s%s); rdma is tried again in %u s", outcome.why, colon,
                outcome.detail.c_str(), socket->returns.wait_ms() / 1000);
}

}  // namespace tcp2rdma::preload
