#include "registry/connection_path.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

#include "libc/real_calls.h"
#include "rdma_stream.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "stats/stats_writer.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {

const char* connection_label(const TrackedSocket* socket) noexcept {
  UpgradeSession* session = socket->session();
  return session != nullptr ? session->label() : "connection";
}

bool mark_connection_back_on_tcp(TrackedSocket* socket, int fd, bool by_mover) noexcept {
  // It may go back to RDMA later, in this process, once no other process holds it (return_plan.h;
  // one shared at a fork is looked at then: upgrade/return_to_rdma.h). Planned before the path says
  // back on TCP: from then on every kernel call on it is counted, so a return never starts under a
  // call that began uncounted (TrackedSocket::begin_tcp_call). One passed to another process never.
  if (!socket->back_on_tcp() && socket->returns.remembered() && !socket->forks.passed()) {
    auto now = std::chrono::steady_clock::now();
    socket->returns.arm(now);
    // The peer's marker said that its side waits for the return at once (it changed credentials): the
    // attempt is due at this process's next call.
    transport::RdmaStream* moved = socket->own_stream();
    if (!by_mover && moved != nullptr && moved->peer_returns_at_once()) socket->returns.hurry(now);
  }
  // Exactly one call makes it so: the mover's, or (when no thread of ours moves it) the first to see
  // the peer's move.
  bool moved_back = by_mover && socket->move_path(Path::kMovingBack, Path::kBackOnTcp);
  bool failed_over = by_mover && !moved_back && socket->move_path(Path::kFailingOver, Path::kBackOnTcp);
  bool marked = moved_back || failed_over || (!by_mover && socket->move_path(Path::kRdma, Path::kBackOnTcp));
  if (!marked) return false;
  stats::slot_on_tcp(socket->stats_slot.load(std::memory_order_relaxed),
                     failed_over ? stats::TcpReason::kFailedOver : stats::TcpReason::kMovedBack,
                     failed_over ? "the rdma path failed" : moved_back ? "moved back by this process (fork, exec)"
                                                                       : "the peer moved it back");
  SavedErrno keep_errno;
  transport::RdmaStream* stream = socket->own_stream();
  // The stream's end (our shutdown(SHUT_WR) went onto it, or came while the connection failed over)
  // is the TCP socket's now.
  bool asked_meanwhile = socket->on_tcp_shut_asked();
  if ((stream != nullptr && stream->write_was_shut()) || asked_meanwhile) {
    real().shutdown(fd, SHUT_WR);
  }
  // TCP_CORK as the application last set it on RDMA, where the kernel socket was not told: set until
  // it holds, a setsockopt of another thread that still saw RDMA may have changed it meanwhile.
  if (socket->cork_unsynced.exchange(false)) {
    bool on;
    do {
      on = socket->corked.load();
      int value = on ? 1 : 0;
      real().setsockopt(fd, IPPROTO_TCP, TCP_CORK, &value, sizeof value);
    } while (socket->corked.load() != on);
  }
  // The side that moved says so itself, with what it kept (move_back).
  if (!by_mover) log_line("%s: back on tcp (the peer moved)", connection_label(socket));
  return true;
}

}  // namespace tcp2rdma::preload
