#include "upgrade/upgrade.h"

#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "libc/real_calls.h"
#include "listener/rdma_listener.h"
#include "registry/connection_policy.h"
#include "registry/fd_table.h"
#include "registry/upgrade_session.h"
#include "stats/stats_writer.h"
#include "upgrade/background.h"
#include "upgrade/refusals.h"
#include "upgrade/upgrade_steps.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

// upgrade: before-return and required: the upgrade runs in the application's call.
bool upgrade_now(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision) {
  SocketHold socket = SocketHold::of(fd), hold_listener(listener);  // the whole upgrade: seconds, maybe
  if (!socket) return true;
  UpgradeSession* session = socket->start_session();
  if (session == nullptr) return true;  // decided and upgraded once already
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label);
  session->set_label(label);
  Connection c = describe(fd, role, socket.get(), listener, decision);
  return conclude(c, session, run_upgrade(c, session), false);
}

// How often a server's accept() that waits for its connection's upgrade looks at what its client asked.
constexpr auto kLookAgain = std::chrono::milliseconds(20);

// upgrade: before-return, a server's connection. The engine answers its client's request, as in the
// background (upgrade_beside), while accept() waits for the upgrade to end (up to the upgrade timeout:
// a plain client never asks); the wait can then stop early without losing the upgrade. It does when
// the client has asked for another connection of this listener first: a client that upgrades its
// connections one at a time (a single-threaded event loop) waits for the answer to one this server
// has not accepted yet and asks for this one only after, so a single-threaded server that waited here
// would wait out the timeout while its client waits for it. accept() returns then, the upgrade going
// on beside the application, and the next accept() finds the other's request waiting.
bool accept_when_upgraded(int fd, TrackedSocket* listener, const config::Decision& decision) {
  SocketHold socket = SocketHold::of(fd);
  if (!socket || !upgrade_beside(fd, config::Role::kServer, listener, decision)) return true;
  UpgradeSession* session = socket->session();
  if (session == nullptr) return true;
  session->note_used();  // this process waits for it: the request is answered as soon as it comes
  Connection c = describe(fd, config::Role::kServer, socket.get(), listener, decision);
  if (!c.have_tuple) return true;
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(decision.options->upgrade_timeout_us);
  while (!session->wait_over_for(kLookAgain)) {
    if (client_asks_elsewhere(listener, c.tuple)) {
      log_line("%s: its client asked for another connection first; the upgrade goes on beside the application",
               session->label());
      return true;
    }
    if (std::chrono::steady_clock::now() >= until) return true;  // the engine's own timeout ends it
  }
  return true;
}

// A client connection to a server that refused RDMA lately (refusals.h) stays TCP at once, as one
// whose rule says TCP does: no session, no upgrade thread, no system call but the log line's. The
// connect()'s own address names the server; a rule that requires RDMA goes the whole way (and fails).
bool stays_for_refusal(int fd, const config::Decision& decision, const sockaddr* remote, socklen_t len) {
  if (remote == nullptr || len == 0 || len > sizeof(sockaddr_storage) ||
      decision.options->upgrade == config::UpgradeMode::kRequired) {
    return false;
  }
  sockaddr_storage server{};
  std::memcpy(&server, remote, len);
  auto left = refused_for(server);
  if (left.count() == 0) return false;
  char why[96];
  std::snprintf(why, sizeof why, "stays tcp (the server refused RDMA lately: asked again in %lld ms)",
                static_cast<long long>(left.count()));
  log_connection(fd, config::Role::kClient, decision, why, remote, len);
  if (SocketHold socket = SocketHold::of(fd)) {
    stats::slot_on_tcp(socket->stats_slot.load(std::memory_order_relaxed), stats::TcpReason::kPeerDeclined,
                       "the server refused RDMA lately");
  }
  return true;
}

}  // namespace

bool upgrade_connection(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision,
                        const sockaddr* remote_hint, socklen_t remote_hint_len) {
  if (decision.options->transport != config::Transport::kRdma) {
    log_connection(fd, role, decision, "stays tcp", remote_hint, remote_hint_len);
    // A client whose own rules chose RDMA learns at once that this side keeps it on TCP.
    if (role == config::Role::kServer) decline_request(fd, listener, transport::DeclineReason::kServerStaysTcp);
    return true;
  }
  if (role == config::Role::kClient && stays_for_refusal(fd, decision, remote_hint, remote_hint_len)) return true;
  if (decision.options->upgrade == config::UpgradeMode::kBackground) {
    upgrade_beside(fd, role, listener, decision);
    return true;
  }
  // A before-return server waits while the engine upgrades (accept_when_upgraded); a required one
  // upgrades in the call (upgrade_now), since its failure must fail the accept().
  if (role == config::Role::kServer && listener != nullptr &&
      decision.options->upgrade == config::UpgradeMode::kBeforeReturn) {
    return accept_when_upgraded(fd, listener, decision);
  }
  return upgrade_now(fd, role, listener, decision);
}

bool finish_pending_upgrade(int fd, TrackedSocket* socket) noexcept {
  // One thread runs it; the others see it pending no longer.
  if (!socket->move_path(Path::kUpgradePending, Path::kTcp)) return true;
  SavedErrno keep;
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (real().getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
    // Not connected yet (or the connect failed): look again at the next call.
    socket->move_path(Path::kTcp, Path::kUpgradePending);
    return true;
  }
  // epoll sets the application added the connecting socket to move onto the stream with the upgrade
  // (or, when it stays TCP, go on watching the socket).
  bool usable = upgrade_connection(fd, config::Role::kClient, nullptr, socket->pending_decision);
  if (!usable) {
    // Whichever call ran the upgrade, the application learns of it like a failed connect: SO_ERROR
    // says ECONNRESET, and the socket carries nothing more (shut down both ways).
    socket->pending_error.store(ECONNRESET, std::memory_order_release);
    real().shutdown(fd, SHUT_RDWR);
  }
  return usable;
}

}  // namespace tcp2rdma::preload
