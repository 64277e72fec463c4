// Moving a connected TCP socket onto an RDMA stream (docs/architecture.md, "The byte-exact
// switch"). Nothing is written to the TCP connection until the RDMA connection shows the peer runs
// tcp2rdma; then the two sides agree over RDMA on how many bytes each wrote on TCP, and each writes
// one record on TCP right after them that proves the RDMA connection belongs to this TCP connection.
// The TCP connection stays open beside the stream.
#pragma once

#include <sys/socket.h>

#include "registry/tracked_socket.h"
#include "rule_set.h"

namespace tcp2rdma::preload {

// The one place a connection's path begins, for connect, accept and the pending upgrade of a
// non-blocking connect alike. The rule's decision says: stay TCP (one log line: `remote_hint` is the
// address connect() was given, while the kernel has no peer yet); upgrade: background (the upgrade
// runs beside the application in a thread of its own, and this returns at once; the connection
// carries the application's bytes on TCP meanwhile and each direction moves onto the stream at an
// exact byte offset); before-return or required (the upgrade runs here, in the application's call; a
// server's before-return upgrade is answered by the engine while the call waits for it, and the call
// returns early, the upgrade going on beside it, when the client asked for another connection first).
// Every upgrade logs the path it took. False when the connection must not be used: it failed
// half-way, or RDMA was required and could not be had.
bool upgrade_connection(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision,
                        const sockaddr* remote_hint = nullptr, socklen_t remote_hint_len = 0);

// Runs the upgrade a non-blocking connect left pending (Path::kUpgradePending), if the
// connection is up by now. False when it failed half-way: the connection must then be reported as
// reset (SO_ERROR says ECONNRESET once, and the socket is shut down). Never changes errno.
bool finish_pending_upgrade(int fd, TrackedSocket* socket) noexcept;

}  // namespace tcp2rdma::preload
