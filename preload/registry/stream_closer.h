// The end of a stream whose last descriptor is gone, off the application's thread. Kernel TCP's
// close() returns at once and delivers the socket's bytes afterwards; an RDMA stream must wait for
// the peer's acknowledgements before it may go (its memory is this process's), and a peer that never
// returns a credit made close() wait for ever. So close() hands the stream to one thread of the
// module, which ends it in order (every byte written, then the end) or gives up at the stream's
// timeout with a reset: the peer never reads a clean end after lost bytes. exit() and exec wait for
// what is still being closed, once, bounded by the longest timeout, as the kernel would have delivered
// it after the process was gone.
#pragma once

#include <cstdint>

#include "status.h"

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class TrackedSocket;

// Takes the stream (and deletes it once it has ended). `linger_seconds` as SO_LINGER says: 0 resets
// the connection at once, above 0 waits here up to that long (as the kernel's close() does), -1 (off)
// hands the end to the closer's thread. `tcp`, when not -1, is the module's own descriptor of the
// connection's TCP socket, kept from the application's last close (TrackedSocket::kept_tcp), and
// taken: should the stream's path fail before its end is acknowledged, its bytes and its end fail
// over to TCP (back_to_tcp/failover.h, fail_over_closed), as the kernel delivers a closed socket's.
void close_later(transport::RdmaStream* stream, int linger_seconds, int tcp = -1) noexcept;
// At the application's close of fd, one of `socket`'s descriptors, before the number is freed: when
// it is the last one of a connection on RDMA that ends in order, the module keeps a descriptor of its
// own of the TCP socket (TrackedSocket::kept_tcp) for close_later.
void keep_tcp_for_end(TrackedSocket* socket, int fd) noexcept;
// What runs a closed stream's failover (takes the descriptor; kOk when the end went on TCP):
// back_to_tcp/failover.h sets fail_over_closed when the module is loaded.
using ClosedFailover = transport::Status (*)(transport::RdmaStream* stream, int tcp);
void set_closed_failover(ClosedFailover run) noexcept;
// A stream a forked child still holds (registry/lent_streams.h): instead of its end, the closer's
// thread moves it back to TCP and keeps the answer for the child (hand_back); then it goes.
void hand_back_later(transport::RdmaStream* stream, uint64_t serial) noexcept;
// Waits for every stream handed over so far to have ended (bounded by their timeouts).
void finish_closing() noexcept;
// In a forked child: the streams being closed are the parent's; the child forgets them.
void forget_closing_after_fork() noexcept;

}  // namespace tcp2rdma::preload
