// The steps of one upgrade, wherever it runs (docs/architecture.md, "The byte-exact switch"): what it
// needs to know of its connection, the RDMA setup (the client's connect, the server's answered
// request), the switch, and the conclusion (the log line, the end of the session). upgrade.cpp runs
// them in the application's call, background.cpp beside it.
#pragma once

#include <optional>

#include <sys/socket.h>

#include <chrono>
#include <memory>

#include "rdma_stream.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "rule_set.h"
#include "upgrade/switch.h"

namespace tcp2rdma::preload {

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
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

// Takes what an upgrade needs to know of connection `fd` (its addresses), in the application's call.
Connection describe(int fd, config::Role role, TrackedSocket* socket, TrackedSocket* listener,
                    const config::Decision& decision);

// A server connection's answered request, from the engine: kOk with its stream, or why there is none.
struct Answer {
  transport::Status status = transport::Status::kWouldBlock;
  std::unique_ptr<transport::RdmaStream> stream;
};

// Runs the setup and the switch. A server's setup is `answer` (the engine waited for the request) or,
// without one, a wait here. No exception leaves it (it runs in a pool thread, or in an application's
// C call): memory short anywhere keeps the connection on TCP, or, past the switch's point of no
// return, resets it; either way with a log line.
UpgradeOutcome run_upgrade(const Connection& c, UpgradeSession* session, Answer* answer = nullptr) noexcept;
// A server connection whose listener has no RDMA listener beside it (none could be made, or this
// process of a pre-fork server has none): no request can come, and the outcome is known at once.
// Null when the listener has one (or its lock is busy: the usual way then finds out).
std::optional<UpgradeOutcome> without_request(const Connection& c);

// The log line and the end of the session. After a switch (the phase is kSwitching, so the descriptor
// is still the application's), epoll registrations move onto the stream; a connection broken half-way
// is reset when it runs in the background (in the application's call, the caller reports it).
bool conclude(const Connection& c, UpgradeSession* session, const UpgradeOutcome& outcome, bool background);

// A server connection that stays TCP: its client's RDMA request (held, or still to come) is answered
// at once with why, instead of being left to expire while the client waits.
void decline_request(int fd, TrackedSocket* listener, transport::DeclineReason why);

}  // namespace tcp2rdma::preload
