#include "registry/connection_stats.h"

#include "registry/tracked_socket.h"
#include "stats/stats_writer.h"

namespace tcp2rdma::preload {

void stats_decided(TrackedSocket* socket, int fd, config::Role role, const config::Decision& decision,
                   const sockaddr* local, const sockaddr* remote) {
  stats::SlotIdentity who;
  who.fd = fd;
  who.client = role == config::Role::kClient;
  who.local = local;
  who.remote = remote;
  who.rule = decision.rule != nullptr ? decision.rule->name.c_str() : "";
  who.decided_rdma = decision.options->transport == config::Transport::kRdma;
  stats::close_slot(socket->stats_slot.exchange(stats::open_slot(who), std::memory_order_acq_rel));
}

stats::TcpReason reason_of(transport::Status s) {
  switch (s) {
    case transport::Status::kRejected: return stats::TcpReason::kPeerDeclined;
    case transport::Status::kNoDevice:
    case transport::Status::kNoRoute:
    case transport::Status::kTimeout:
    case transport::Status::kAddressInUse:
    case transport::Status::kReset: return stats::TcpReason::kNoRdma;
    case transport::Status::kMemoryLock:
    case transport::Status::kPinLimit:
    case transport::Status::kResources:
    case transport::Status::kDescriptors: return stats::TcpReason::kResources;
    default: return stats::TcpReason::kOther;
  }
}

}  // namespace tcp2rdma::preload
