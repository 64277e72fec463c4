// Changes of the path a connection's bytes take that more than one folder makes happen: here so that
// each of them is written once, below everything that causes it.
#pragma once

namespace tcp2rdma::preload {

class TrackedSocket;

// The connection's label for log lines (UpgradeSession::label), or "connection" before it has one.
const char* connection_label(const TrackedSocket* socket) noexcept;

// The socket's stream has moved both ways (RdmaStream::moved()): the socket is the kernel's again.
// Its TCP sending side is shut down if the stream's was, and the log says so when the peer moved.
// True for the one call that did it: Path::kRdma -> kBackOnTcp, or with `by_mover` (the thread that
// is moving the connection, a fork or a failover: its prefix is set) kMovingBack or kFailingOver ->
// kBackOnTcp; does nothing while another thread moves it. The epoll registrations are the caller's to move, under epoll's lock
// (readiness/epoll_sets.h, epoll_move_back).
bool mark_connection_back_on_tcp(TrackedSocket* socket, int fd, bool by_mover = false) noexcept;

}  // namespace tcp2rdma::preload
