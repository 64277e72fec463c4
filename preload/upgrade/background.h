// upgrade: background (docs/links.md, "The upgrade engine"): the upgrade runs beside the application,
// in the engine's thread and pools, and the application's call returns at once.
#pragma once

#include "registry/tracked_socket.h"
#include "rule_set.h"

namespace tcp2rdma::preload {

// How an upgrade's session starts: the connection's first; one that takes up an upgrade a fork
// deferred (process/deferred_upgrade.h), in a new session that goes on from the ended one's counts; or
// a connection back on TCP going back to RDMA (return_to_rdma.h), in a new session after the ended one.
enum class SessionStart : uint8_t { kFirst, kResumed, kReturn };

// Starts the background upgrade of connection `fd` (a client's, or a server's accepted from
// `listener`). Whatever becomes of it is logged; a connection broken half-way is reset. False when no
// session started (the connection has one under way, or kReturn found it shared).
bool upgrade_beside(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision,
                    SessionStart start = SessionStart::kFirst);

}  // namespace tcp2rdma::preload
