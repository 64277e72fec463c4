#include "upgrade/upgrade_steps.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "libc/real_calls.h"
#include "listener/rdma_listener.h"
#include "readiness/epoll_sets.h"
#include "registry/connection_policy.h"
#include "registry/connection_stats.h"
#include "registry/upgrade_session.h"
#include "tuple_address.h"
#include "stats/stats_writer.h"
#include "upgrade/refusals.h"
#include "upgrade/return_to_rdma.h"
#include "upgrade/switch.h"
#include "upgrade/switch_frames.h"
#include "util/log.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;

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

// `hello`: the client's HELLO as its counts are now, which a channel opened on a live link carries in
// its open (the switch then saves a round trip: switch_exchange.h).
transport::Status connect_stream(const Connection& c, std::span<const uint8_t> hello,
                                 std::unique_ptr<transport::RdmaStream>* out, transport::DeclineReason* declined) {
  transport::Pairing pairing;
  pairing.tuple = c.tuple;
  pairing.client_nonce = transport::random_nonce();
  pairing.first_bytes = hello;
  return transport::RdmaStream::connect(reinterpret_cast<const sockaddr*>(&c.server), pairing,
                                        stream_options(*c.decision.options), out, declined);
}

}  // namespace

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

void decline_request(int fd, TrackedSocket* listener, transport::DeclineReason why) {
  if (listener == nullptr || !serves_rdma(listener)) return;  // no request can come: no system call
  transport::TcpTuple tuple{};
  sockaddr_storage server{};
  if (tuple_of(fd, false, &tuple, &server)) decline(listener, tuple, why);
}

namespace {

// The server's half of the setup: the request the engine answered (`answer`), or, when the upgrade
// runs in the application's call, the wait for it here.
transport::Status accept_stream(const Connection& c, UpgradeSession* session, Answer* answer,
                                std::unique_ptr<transport::RdmaStream>* out) {
  if (answer == nullptr) return accept_request(c.listener, c.tuple, *c.decision.options, session, out);
  if (answer->status != transport::Status::kOk) return answer->status;
  transport::Status s = answer->stream->await_established();
  if (s == transport::Status::kOk) *out = std::move(answer->stream);
  return s;
}

// A server connection whose listener has no rdma_cm listener beside it, and why, when its making failed
// (a process that may register no memory makes none: its clients can only hear "no listener").
UpgradeOutcome no_rdma_listener(TrackedSocket* listener) {
  UpgradeOutcome outcome{false, true, "no RDMA listener on this port"};
  if (transport::Status failure = why_no_rdma_listener(listener); failure != transport::Status::kOk) {
    outcome.reason = reason_of(failure);
    outcome.detail = why_not(failure);
  }
  return outcome;
}

UpgradeOutcome run_upgrade_steps(const Connection& c, UpgradeSession* session, Answer* answer) {
  // Settled while it waited in a pool's queue (closed, fork, exec): no RDMA connection is made for it.
  if (session->phase() == UpgradeSession::Phase::kOver) {
    // A fork deferred it after the engine answered its client's request: the client, waiting in its
    // switch, is asked again (switch.h), and the process that takes the upgrade up answers anew.
    if (!c.is_client && session->deferred() && answer != nullptr && answer->stream != nullptr) {
      log_line("%s: the process forked before the switch: its client is asked again", session->label());
      answer->stream->abort_asking_again();
    }
    return {false, true, "the connection was settled", stats::TcpReason::kClosedEarly};
  }
  if (!c.have_tuple) return {false, true, "no addresses for the connection"};
  if (!c.is_client && c.listener == nullptr) return {false, true, "no RDMA listener on this port"};
  if (c.is_client) {
    if (auto left = refused_for(c.server); left.count() > 0) {
      UpgradeOutcome outcome{false, true, "the server refused RDMA lately", stats::TcpReason::kPeerDeclined};
      outcome.detail = "asked again in " + std::to_string(left.count()) + " ms";
      return outcome;
    }
  }
  std::unique_ptr<transport::RdmaStream> stream;
  transport::DeclineReason declined = transport::DeclineReason::kNone;
  // What the client has sent on TCP so far: its HELLO if it writes nothing more before it freezes (an
  // application that waits for the upgrade, `linked_wait`), else restated in the switch.
  Hello predicted{session->sent(), false};
  auto hello = encode_hello(predicted);
  // A return's counts are the kernel's at the freeze, not known before: its HELLO comes in the switch.
  std::span<const uint8_t> first_bytes = session->returning() ? std::span<const uint8_t>{} : std::span(hello);
  transport::Status s =
      c.is_client ? connect_stream(c, first_bytes, &stream, &declined) : accept_stream(c, session, answer, &stream);
  // The wait ended without a request (the rule's upgrade timeout passed, or the connection was
  // settled): a client without tcp2rdma, or whose rules keep this connection on TCP, sends none.
  if (s == transport::Status::kWouldBlock) {
    return {false, true, "no RDMA request from the client in time", stats::TcpReason::kPeerDeclined};
  }
  if (s == transport::Status::kRejected && !c.is_client) return no_rdma_listener(c.listener);
  // What the attempt says of the server to the next connections to it (refusals.h).
  if (c.is_client) {
    if (s == transport::Status::kOk) {
      note_acceptance(c.server);
    } else if (refusal_to_remember(c.fd, session->phase() == UpgradeSession::Phase::kOver, s, declined)) {
      note_refusal(c.server);
    }
  }
  // The server's word on why, when it gave one (a Decline record); else "no tcp2rdma listener".
  if (s == transport::Status::kRejected) {
    return {false, true, transport::to_string(declined), stats::TcpReason::kPeerDeclined};
  }
  if (s != transport::Status::kOk) return {false, true, why_not(s), reason_of(s)};
  // The peer is tcp2rdma (its listener answered with our nonce, or the client asked for this very
  // connection): now, and only now, the switch.
  auto established = Clock::now();
  const Hello* in_open = c.is_client && stream->first_bytes_in_open() ? &predicted : nullptr;
  AskAgain ask_again = nullptr;
  if (c.is_client) {
    ask_again = [&c](const Hello& ours) -> std::unique_ptr<transport::RdmaStream> {
      auto frozen = encode_hello(ours);
      std::unique_ptr<transport::RdmaStream> again;
      transport::DeclineReason ignored = transport::DeclineReason::kNone;
      if (connect_stream(c, frozen, &again, &ignored) != transport::Status::kOk) return nullptr;
      return again;
    };
  }
  UpgradeOutcome outcome = switch_onto(c.fd, c.socket, session, std::move(stream), c.is_client, in_open, ask_again);
  outcome.setup_ms = std::chrono::duration_cast<std::chrono::milliseconds>(established - c.started).count();
  outcome.switch_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - established).count();
  return outcome;
}

}  // namespace

std::optional<UpgradeOutcome> without_request(const Connection& c) {
  if (c.is_client || c.listener == nullptr || !surely_without_rdma(c.listener)) return std::nullopt;
  return no_rdma_listener(c.listener);
}

UpgradeOutcome run_upgrade(const Connection& c, UpgradeSession* session, Answer* answer) noexcept {
  try {
    return run_upgrade_steps(c, session, answer);
  } catch (const std::bad_alloc&) {
    return {false, session->phase() == UpgradeSession::Phase::kOnTcp, "out of memory", stats::TcpReason::kResources};
  } catch (...) {
    return {false, session->phase() == UpgradeSession::Phase::kOnTcp, "an internal error", stats::TcpReason::kOther};
  }
}

namespace {

// The stats segment hears what the log line says, and the bytes the connection moved on TCP meanwhile.
void note_in_stats(const Connection& c, const UpgradeSession& session, const UpgradeOutcome& outcome,
                   const char* words) {
  int32_t slot = c.socket->stats_slot.load(std::memory_order_relaxed);
  stats::slot_add_tcp(slot, session.received(), session.sent());
  const transport::RdmaStream* stream = c.socket->stream();
  if (outcome.upgraded && stream != nullptr) {
    stats::slot_on_rdma(slot, static_cast<uint32_t>(stream->ring_size() >> 10),
                        static_cast<uint32_t>(stream->peer_ring_size() >> 10), static_cast<uint32_t>(outcome.setup_ms),
                        static_cast<uint32_t>(outcome.switch_ms));
  } else {
    stats::slot_on_tcp(slot, outcome.reason, words);
  }
}

}  // namespace

bool conclude(const Connection& c, UpgradeSession* session, const UpgradeOutcome& outcome, bool background) {
  char path[256];
  bool required = c.decision.options->upgrade == config::UpgradeMode::kRequired;
  const transport::RdmaStream* stream = c.socket->stream();
  if (outcome.upgraded && stream != nullptr) {
    c.socket->follows_fork.store(c.decision.options->on_fork == config::ForkMode::kTcp, std::memory_order_relaxed);
    // Rings that start small say what they grow to (docs/links.md, "Rings that grow and shrink").
    char grows[48] = "";
    if (stream->ring_grows_to() > stream->ring_size()) {
      snprintf(grows, sizeof grows, " (ours grows to %llu KiB)", static_cast<unsigned long long>(stream->ring_grows_to() >> 10));
    }
    snprintf(path, sizeof path,
             "upgraded to rdma (receive ring %llu KiB, the peer's %llu KiB%s; switched after %llu bytes sent "
             "and %llu received on tcp; setup %ld ms, switch %ld ms)",
             static_cast<unsigned long long>(stream->ring_size() >> 10),
             static_cast<unsigned long long>(stream->peer_ring_size() >> 10), grows,
             static_cast<unsigned long long>(session->sent()), static_cast<unsigned long long>(session->received()),
             outcome.setup_ms, outcome.switch_ms);
  } else if (required) {
    // The rule would rather have no connection than a TCP one.
    snprintf(path, sizeof path, "fails: the upgrade is required (%s%s%s)", outcome.why,
             outcome.detail.empty() ? "" : ": ", outcome.detail.c_str());
  } else if (!outcome.connection_usable) {
    // The switch broke half-way (the two sides' byte counts are split): the connection is reset
    // below, and the line must not say it stays on TCP.
    snprintf(path, sizeof path, "reset: the switch broke (%s%s%s)", outcome.why, outcome.detail.empty() ? "" : ": ",
             outcome.detail.c_str());
  } else {
    snprintf(path, sizeof path, "stays tcp (%s%s%s)", outcome.why, outcome.detail.empty() ? "" : ": ",
             outcome.detail.c_str());
  }
  bool usable = outcome.connection_usable && (outcome.upgraded || !required);
  if (outcome.upgraded && stream != nullptr) c.socket->returns.remember(c.decision);  // for a return later
  // A return says so in its own words, and plans the next attempt when it failed (return_to_rdma.h).
  if (session->returning()) conclude_return(c.socket, outcome, stream, path, sizeof path);
  if (session->phase() == UpgradeSession::Phase::kOnTcp) {
    // It never got to the switch. Settled meanwhile (closed, fork, exec, exit): that call logged it,
    // and a close forgot the registrations (the descriptor may name another socket by now).
    if (session->end_on_tcp()) {
      log_line("%s: %s", session->label(), path);
      note_in_stats(c, *session, outcome, path);
      epoll_move_pending(c.fd, false);
    }
    return usable;
  }
  if (session->phase() == UpgradeSession::Phase::kOver) return usable;  // settled before the freeze
  log_line("%s: %s", session->label(), path);
  note_in_stats(c, *session, outcome, path);
  epoll_move_pending(c.fd, stream != nullptr);
  if (!outcome.connection_usable && background) {
    // Reset, so the peer never reads a clean end; SO_ERROR says ECONNRESET.
    c.socket->pending_error.store(ECONNRESET, std::memory_order_release);
    reset_connection(c.fd);
  }
  session->finish();
  return usable;
}

}  // namespace tcp2rdma::preload
