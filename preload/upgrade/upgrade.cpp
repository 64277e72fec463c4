#include "upgrade/upgrade.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "libc/real_calls.h"
#include "listener/rdma_listener.h"
#include "readiness/epoll_sets.h"
#include "registry/connection_policy.h"
#include "registry/fd_table.h"
#include "registry/upgrade_session.h"
#include "stream_listener.h"
#include "tuple_address.h"
#include "upgrade/switch.h"
#include "util/log.h"
#include "util/quiet_thread.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;

// Switches run in threads of their own (upgrade: background); beyond this many at once a connection
// stays TCP.
constexpr int kMaxBackgroundSwitches = 64;
std::atomic<int> g_background_switches{0};

// An IPv4 peer of a dual-stack IPv6 socket appears as ::ffff:a.b.c.d: both ends must name it alike.
void put_address(const sockaddr_storage& s, uint8_t* addr, uint16_t* port, uint8_t* family) {
  *family = transport::tuple_address(reinterpret_cast<const sockaddr*>(&s), addr);
  *port = ntohs(s.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&s)->sin_port
                                       : reinterpret_cast<const sockaddr_in6*>(&s)->sin6_port);
}

// The TCP 4-tuple as the client sees it, and the server's address (where its rdma_cm listens).
bool tuple_of(int fd, bool is_client, transport::TcpTuple* tuple, sockaddr_storage* server) {
  sockaddr_storage local{}, remote{};
  socklen_t local_len = sizeof local, remote_len = sizeof remote;
  if (real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      real().getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) {
    return false;
  }
  const sockaddr_storage& client = is_client ? local : remote;
  *server = is_client ? remote : local;
  *tuple = transport::TcpTuple{};
  uint8_t client_family = 0, server_family = 0;
  uint16_t client_port = 0, server_port = 0;
  put_address(client, tuple->client_addr, &client_port, &client_family);
  put_address(*server, tuple->server_addr, &server_port, &server_family);
  tuple->client_port = client_port;
  tuple->server_port = server_port;
  tuple->family = server_family;
  // An IPv4-mapped server address is kept: the transport connects to the IPv4 address it is
  // (rdma_address.h).
  return client_family == tuple->family;
}

// What an upgrade needs to know of its connection, taken in the application's call: the switch thread
// must not touch the descriptor before the switch freezes it.
struct Connection {
  int fd = -1;
  bool is_client = false;
  TrackedSocket* socket = nullptr;
  TrackedSocket* listener = nullptr;  // server: the listener it was accepted from
  config::Decision decision;
  bool have_tuple = false;
  transport::TcpTuple tuple{};
  sockaddr_storage server{};
  Clock::time_point started = Clock::now();
};

Connection describe(int fd, config::Role role, TrackedSocket* socket, TrackedSocket* listener,
                    const config::Decision& decision) {
  Connection c;
  c.fd = fd;
  c.is_client = role == config::Role::kClient;
  c.socket = socket;
  c.listener = listener;
  c.decision = decision;
  c.have_tuple = tuple_of(fd, c.is_client, &c.tuple, &c.server);
  return c;
}

transport::Status connect_stream(const Connection& c, std::unique_ptr<transport::RdmaStream>* out,
                                 transport::DeclineReason* declined) {
  transport::Pairing pairing;
  pairing.tuple = c.tuple;
  pairing.client_nonce = transport::random_nonce();
  return transport::RdmaStream::connect(reinterpret_cast<const sockaddr*>(&c.server), pairing,
                                        stream_options(*c.decision.options), out, declined);
}

// A server connection that stays TCP: its client's RDMA request (held, or still to come) is answered
// at once with why, instead of being left to expire while the client waits.
void decline_request(int fd, TrackedSocket* listener, transport::DeclineReason why) {
  if (listener == nullptr || !serves_rdma(listener)) return;  // no request can come: no system call
  transport::TcpTuple tuple{};
  sockaddr_storage server{};
  if (tuple_of(fd, false, &tuple, &server)) decline(listener, tuple, why);
}


UpgradeOutcome run_upgrade_steps(const Connection& c, UpgradeSession* session) {
  if (!c.have_tuple) return {false, true, "no addresses for the connection"};
  if (!c.is_client && c.listener == nullptr) return {false, true, "no RDMA listener on this port"};
  std::unique_ptr<transport::RdmaStream> stream;
  transport::DeclineReason declined = transport::DeclineReason::kNone;
  transport::Status s = c.is_client ? connect_stream(c, &stream, &declined)
                                     : accept_request(c.listener, c.tuple, *c.decision.options, session, &stream);
  if (s == transport::Status::kWouldBlock) return {false, true, "the client asked for no RDMA connection"};
  if (s == transport::Status::kRejected && !c.is_client) return {false, true, "no RDMA listener on this port"};
  // The server's word on why, when it gave one (a Decline record); else "no tcp2rdma listener".
  if (s == transport::Status::kRejected) return {false, true, transport::to_string(declined)};
  if (s != transport::Status::kOk) return {false, true, why_not(s)};
  // The peer is tcp2rdma (its listener answered with our nonce, or the client asked for this very
  // connection): now, and only now, the switch.
  auto established = Clock::now();
  UpgradeOutcome outcome = switch_onto(c.fd, c.socket, session, std::move(stream), c.is_client);
  outcome.setup_ms = std::chrono::duration_cast<std::chrono::milliseconds>(established - c.started).count();
  outcome.switch_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - established).count();
  return outcome;
}

// No exception leaves an upgrade (it runs in a thread of its own, or in an application's C call):
// memory short anywhere in it (a stream's parts, the peer's TCP tail) keeps the connection on TCP,
// or, past the switch's point of no return, resets it; either way with a log line.
UpgradeOutcome run_upgrade(const Connection& c, UpgradeSession* session) noexcept {
  try {
    return run_upgrade_steps(c, session);
  } catch (const std::bad_alloc&) {
    return {false, session->phase() == UpgradeSession::Phase::kOnTcp, "out of memory"};
  } catch (...) {
    return {false, session->phase() == UpgradeSession::Phase::kOnTcp, "an internal error"};
  }
}

// The log line and the end of the session. After a switch (the phase is kSwitching, so the descriptor
// is still the application's), epoll registrations move onto the stream; a connection broken half-way
// is reset when it runs in the background (in the application's call, the caller reports it).
bool conclude(const Connection& c, UpgradeSession* session, const UpgradeOutcome& outcome, bool background) {
  char path[256];
  bool required = c.decision.options->upgrade == config::UpgradeMode::kRequired;
  const transport::RdmaStream* stream = c.socket->stream();
  if (outcome.upgraded && stream != nullptr) {
    c.socket->follows_fork.store(c.decision.options->on_fork == config::ForkMode::kTcp, std::memory_order_relaxed);
    snprintf(path, sizeof path,
             "upgraded to rdma (receive ring %llu KiB, the peer's %llu KiB; switched after %llu bytes sent "
             "and %llu received on tcp; setup %ld ms, switch %ld ms)",
             static_cast<unsigned long long>(stream->ring_size() >> 10),
             static_cast<unsigned long long>(stream->peer_ring_size() >> 10),
             static_cast<unsigned long long>(session->sent()), static_cast<unsigned long long>(session->received()),
             outcome.setup_ms, outcome.switch_ms);
  } else if (required) {
    // The rule would rather have no connection than a TCP one.
    snprintf(path, sizeof path, "fails: the upgrade is required (%s%s%s)", outcome.why,
             outcome.detail.empty() ? "" : ": ", outcome.detail.c_str());
  } else {
    snprintf(path, sizeof path, "stays tcp (%s%s%s)", outcome.why, outcome.detail.empty() ? "" : ": ",
             outcome.detail.c_str());
  }
  bool usable = outcome.connection_usable && (outcome.upgraded || !required);
  if (session->phase() == UpgradeSession::Phase::kOnTcp) {
    // It never got to the switch. Settled meanwhile (closed, fork, exec, exit): that call logged it,
    // and a close forgot the registrations (the descriptor may name another socket by now).
    if (session->end_on_tcp()) {
      log_line("%s: %s", session->label(), path);
      epoll_move_pending(c.fd, false);
    }
    return usable;
  }
  if (session->phase() == UpgradeSession::Phase::kOver) return usable;  // settled before the freeze
  log_line("%s: %s", session->label(), path);
  epoll_move_pending(c.fd, stream != nullptr);
  if (!outcome.connection_usable && background) {
    // Reset, so the peer never reads a clean end; SO_ERROR says ECONNRESET.
    c.socket->pending_error.store(ECONNRESET, std::memory_order_release);
    reset_connection(c.fd);
  }
  session->finish();
  return usable;
}

// A session without its wake fd (no descriptor left above the application's limit, own_descriptors.h)
// cannot tell the application's pollers that the connection moved: the connection stays TCP.
bool stays_for_want_of_descriptors(UpgradeSession* session) {
  if (session->wake_fd() >= 0 || !session->end_on_tcp()) return false;
  log_line("%s: stays tcp (%s)", session->label(), why_not(transport::Status::kDescriptors));
  return true;
}

// upgrade: before-return and required: the upgrade runs in the application's call.
bool upgrade_now(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision) {
  SocketHold socket = SocketHold::of(fd), hold_listener(listener);  // the whole upgrade: seconds, maybe
  if (!socket) return true;
  UpgradeSession* session = socket->start_session();
  if (session == nullptr) return true;  // decided and upgraded once already
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label);
  session->set_label(label);
  if (stays_for_want_of_descriptors(session)) return decision.options->upgrade != config::UpgradeMode::kRequired;
  Connection c = describe(fd, role, socket.get(), listener, decision);
  return conclude(c, session, run_upgrade(c, session), false);
}

// upgrade: background: the upgrade runs beside the application, in a thread of its own, and this
// returns at once.
void upgrade_beside(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision) {
  SocketHold socket = SocketHold::of(fd);
  if (!socket) return;
  if (g_background_switches.fetch_add(1) >= kMaxBackgroundSwitches) {
    g_background_switches.fetch_sub(1);
    log_connection(fd, role, decision, "stays tcp (too many upgrades under way in this process)");
    decline_request(fd, listener, transport::DeclineReason::kBusy);
    return;
  }
  UpgradeSession* session = socket->start_session();
  if (session == nullptr) {
    g_background_switches.fetch_sub(1);
    return;
  }
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label);
  session->set_label(label);
  if (stays_for_want_of_descriptors(session)) {
    g_background_switches.fetch_sub(1);
    return;
  }
  std::shared_ptr<Connection> c;
  try {
    c = std::make_shared<Connection>(describe(fd, role, socket.get(), listener, decision));
  } catch (const std::bad_alloc&) {
    if (session->end_on_tcp()) log_line("%s: stays tcp (out of memory)", label);
    epoll_move_pending(fd, false);
    g_background_switches.fetch_sub(1);
    return;
  }
  socket->add_ref();  // the thread's, until it is done with the socket and its listener
  if (listener != nullptr) listener->add_ref();
  auto let_go = [c] {
    c->socket->release();
    if (c->listener != nullptr) c->listener->release();
    g_background_switches.fetch_sub(1);
  };
  std::thread thread = start_quiet_thread([c, session, let_go] {
    conclude(*c, session, run_upgrade(*c, session), true);
    let_go();
  });
  if (thread.joinable()) {
    thread.detach();
    return;
  }
  if (session->end_on_tcp()) log_line("%s: stays tcp (cannot start a thread for the upgrade)", label);
  epoll_move_pending(fd, false);
  let_go();
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
  if (decision.options->upgrade == config::UpgradeMode::kBackground) {
    upgrade_beside(fd, role, listener, decision);
    return true;
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
