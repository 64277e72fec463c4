// Moving a connected TCP socket onto an RDMA stream (docs/architecture.md, "The byte-exact
// handover"). Nothing is written to the TCP connection until the RDMA connection shows the peer runs
// tcp2rdma; then the two sides agree over RDMA on how many bytes each wrote on TCP, and each writes
// one record on TCP right after them that proves the RDMA connection belongs to this TCP connection.
// The TCP connection stays open beside the stream.
#pragma once

#include <chrono>
#include <string>

#include "options.h"
#include "rule_set.h"
#include "rdma_stream.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

transport::StreamOptions stream_options(const config::ConnectionOptions& options);

// What an upgrade attempt came to: `upgraded`, or the reason it stayed TCP (for the log line), and
// whether the TCP connection is still fit for use (false only when it failed half-way, after records).
struct UpgradeOutcome {
  bool upgraded = false;
  bool connection_usable = true;
  const char* why = "";
  std::string detail = {};  // the stream's own words on why it failed, when it did (rdma_stream.h)
  long setup_ms = 0;   // from the start until the RDMA connection was established
  long switch_ms = 0;  // the switch itself
};

// A client's RDMA request that no accepted connection claims is rejected after this long.
inline constexpr std::chrono::milliseconds kRequestHold{5000};

// A listener a rule may select RDMA for: start an rdma_cm listener on the same address and port.
// Failure (no device, port taken) is logged unless `log_failure` is false; that listener's
// connections then stay TCP.
transport::Status listen_rdma(int fd, TrackedSocket* listener, bool log_failure = true);
// A process of a pre-fork server whose listener's port another process holds: an rdma_cm listener on
// the same address and a port of its own (recorded in own_rdma_port), where the holder sends this
// process's requests.
transport::Status listen_rdma_on_own_port(int fd, TrackedSocket* listener);
// A process with its own port taking over the listener's port (its holder exited): an rdma_cm
// listener there, in directory_listener.
transport::Status listen_rdma_for_directory(int fd, TrackedSocket* listener);

// Undoes listen_rdma when the real listen() then failed.
void drop_rdma_listener(TrackedSocket* listener);

// Whether fd is bound to a port already (bind() was called), i.e. listen() will not pick one.
bool has_bound_port(int fd);

// Runs the upgrade of a connection decided for RDMA now, in the application's call (upgrade:
// before-return and required), and logs the path it took. False when the connection must not be
// used: it failed half-way, or RDMA was required and could not be had.
bool upgrade_and_log(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision);

// upgrade: background: starts the upgrade beside the application, in a thread of its own, and
// returns at once. The connection carries the application's bytes on TCP meanwhile, and each
// direction moves onto the stream at an exact byte offset (docs/architecture.md); the thread logs
// the path taken.
void upgrade_in_background(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision);

}  // namespace tcp2rdma::preload
