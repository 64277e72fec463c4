// upgrade: background (docs/links.md, "The upgrade engine"): the upgrade runs beside the application,
// in the engine's thread and pools, and the application's call returns at once.
#pragma once

#include "registry/tracked_socket.h"
#include "rule_set.h"

namespace tcp2rdma::preload {

// Starts the background upgrade of connection `fd` (a client's, or a server's accepted from
// `listener`). Whatever becomes of it is logged; a connection broken half-way is reset.
void upgrade_beside(int fd, config::Role role, TrackedSocket* listener, const config::Decision& decision);

}  // namespace tcp2rdma::preload
