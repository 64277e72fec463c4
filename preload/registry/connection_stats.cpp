#include "registry/connection_stats.h"

#include "libc/real_calls.h"
#include "registry/tracked_socket.h"
#include "stats/stats_writer.h"
#include "util/saved_errno.h"

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

void stats_taken_over(TrackedSocket* socket, int fd, config::Role role, const config::Decision& decision) {
  SavedErrno keep;
  sockaddr_storage local{}, remote{};
  socklen_t local_len = sizeof local, remote_len = sizeof remote;
  bool has_local = real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0;
  bool has_remote = real().getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) == 0;
  stats_decided(socket, fd, role, decision, has_local ? reinterpret_cast<sockaddr*>(&local) : nullptr,
                has_remote ? reinterpret_cast<sockaddr*>(&remote) : nullptr);
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
