// Back to RDMA (docs/architecture.md, "Back to RDMA"): a connection that was on RDMA and went back to
// TCP (its path failed, the peer moved it back) upgrades again, in the background, in the process that
// uses it, once its return plan says an attempt is due (registry/return_plan.h). The client asks; the
// server's engine answers a request that names the connection's next upgrade (TcpTuple::reserved);
// the switch is the first one's, with the TCP bytes counted by the kernel.
#pragma once

#include <cstddef>

#include "registry/tracked_socket.h"
#include "upgrade/switch.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

// Asks whether a connection a forked child claimed while its parent held it is the child's alone
// now (process/fork_service.h, learn_if_alone: a layer above this one passes it in).
using LearnAlone = bool (*)(TrackedSocket* socket);

// An application's call on fd, whose socket is back on TCP: starts the return when one is due. One
// load and a clock read while none is; never blocks (the attempt runs beside the application; a
// child's question to its parent waits at most 500 ms, at most three times a connection).
void try_return(TrackedSocket* socket, int fd, LearnAlone learn_alone) noexcept;
inline void return_if_due(TrackedSocket* socket, int fd, LearnAlone learn_alone) noexcept {
  if (socket->returns.armed() && socket->back_on_tcp()) try_return(socket, fd, learn_alone);
}

// The end of a return attempt (upgrade_steps.h, conclude): the plan learns of it (done, or the next
// attempt later) and *words say what became of the connection for the log line.
void conclude_return(TrackedSocket* socket, const UpgradeOutcome& outcome, const transport::RdmaStream* stream,
                     char* words, size_t size) noexcept;

}  // namespace tcp2rdma::preload
