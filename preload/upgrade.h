// Moving a connected TCP socket onto an RDMA stream, before connect()/accept() return to the
// application (docs/architecture.md, "The upgrade as built"). Nothing is written to the TCP connection
// until the RDMA connection shows the peer runs tcp2rdma; then each side writes one record on TCP that
// proves the RDMA connection belongs to this TCP connection. The TCP connection stays open beside the
// stream.
#pragma once

#include "options.h"
#include "rule_set.h"
#include "rdma_stream.h"
#include "tracked_socket.h"

namespace tcp2rdma::preload {

transport::StreamOptions stream_options(const config::ConnectionOptions& options);

// What an upgrade attempt came to: `upgraded`, or the reason it stayed TCP (for the log line), and
// whether the TCP connection is still fit for use (false only when it failed half-way, after records).
struct UpgradeOutcome {
  bool upgraded = false;
  bool connection_usable = true;
  const char* why = "";
};

// A listener a rule may select RDMA for: start an rdma_cm listener on the same address and port.
// Failure (no device, port taken) is logged unless `log_failure` is false; that listener's
// connections then stay TCP.
transport::Status listen_rdma(int fd, TrackedSocket* listener, bool log_failure = true);

// Undoes listen_rdma when the real listen() then failed.
void drop_rdma_listener(TrackedSocket* listener);

// Whether fd is bound to a port already (bind() was called), i.e. listen() will not pick one.
bool has_bound_port(int fd);

// Client: fd has just connected over TCP.
UpgradeOutcome upgrade_client(int fd, TrackedSocket* socket, const config::ConnectionOptions& options);

// Server: fd was just accepted from `listener`.
UpgradeOutcome upgrade_server(int fd, TrackedSocket* listener, TrackedSocket* socket,
                              const config::ConnectionOptions& options);

// Runs the upgrade for a connection decided for RDMA and logs the path it took. False when the
// connection failed half-way and must not be used.
bool upgrade_and_log(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision);

}  // namespace tcp2rdma::preload
