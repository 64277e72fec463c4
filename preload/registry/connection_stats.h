// What the process's stats segment (stats/stats_writer.h, docs/stats.md) hears of a connection: its
// decision here, its arrival on RDMA and why it is on TCP where the upgrade concludes, its bytes where
// they move (data/). The socket keeps the slot (TrackedSocket::stats_slot).
#pragma once

#include <sys/socket.h>

#include "rule_set.h"
#include "stats/stats_segment.h"
#include "status.h"

namespace tcp2rdma::preload {

class TrackedSocket;

// A slot for the connection's decision; a socket decided again (a second connect) gives up its old one.
void stats_decided(TrackedSocket* socket, int fd, config::Role role, const config::Decision& decision,
                   const sockaddr* local, const sockaddr* remote);
// A connection this process takes over from the one it forked from (a child's take-up of an upgrade
// the fork interrupted): a slot in this process's own segment, the inherited index being the parent's.
void stats_taken_over(TrackedSocket* socket, int fd, config::Role role, const config::Decision& decision);
// The category the totals count for an upgrade the transport ended with `s`.
stats::TcpReason reason_of(transport::Status s);

}  // namespace tcp2rdma::preload
