// upgrade: background (docs/links.md, "The upgrade engine"): the upgrade runs beside the application,
// in the engine's thread and pools, and the application's call returns at once.
#pragma once

#include "registry/tracked_socket.h"
#include "rule_set.h"

namespace tcp2rdma::preload {

// Starts the background upgrade of connection `fd` (a client's, or a server's accepted from
// `listener`). Whatever becomes of it is logged; a connection broken half-way is reset. `resumed`: it
// takes up an upgrade a fork deferred (process/deferred_upgrade.h), in a new session that goes on
// from the ended one's counts.
void upgrade_beside(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision,
                    bool resumed = false);

}  // namespace tcp2rdma::preload
