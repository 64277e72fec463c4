#include "readiness/stream_events.h"

#include <poll.h>

#include <cerrno>
#include <new>

#include "libc/real_calls.h"
#include "rdma_stream.h"
#include "registry/tcp_prefix.h"

namespace tcp2rdma::preload {

short poll_events_of(const transport::Readiness& r, short requested) noexcept {
  short events = 0;
  if (r.readable) events |= static_cast<short>(requested & (POLLIN | POLLRDNORM));
  if (r.writable) events |= static_cast<short>(requested & (POLLOUT | POLLWRNORM));
  if (r.failed) events |= POLLERR | POLLHUP;
  if (r.hung_up) events |= POLLHUP;
  if (r.error_pending) events |= POLLERR;
  // A reset ends the receiving side too: the kernel reports POLLRDHUP for it as for the peer's end
  // (and for a shutdown(SHUT_RD) here).
  if (r.failed || r.peer_closed || r.read_shut) events |= static_cast<short>(requested & POLLRDHUP);
  return events;
}

short stream_poll_events(transport::RdmaStream* stream, short requested, bool* moved, bool watched) noexcept {
  transport::Readiness r = stream->readiness((requested & (POLLOUT | POLLWRNORM)) != 0, !watched);
  if (moved != nullptr) *moved = r.moved;
  return poll_events_of(r, requested);
}

short prefixed_poll_events(int fd, short requested) noexcept {
  pollfd p{fd, static_cast<short>(requested & ~(POLLIN | POLLRDNORM)), 0};
  short events = real().poll(&p, 1, 0) > 0 ? p.revents : 0;
  return static_cast<short>(events | (requested & (POLLIN | POLLRDNORM)));
}

short relay_poll_input(TcpPrefix& queue, short requested, pollfd* bell, std::vector<std::shared_ptr<const int>>* bells) {
  short in = static_cast<short>(requested & (POLLIN | POLLRDNORM));
  if (in == 0) return 0;
  if (queue.readable_or_arm()) return in;
  // A feeder killed by a signal never rings again (one that exits or execs ends the feeding first).
  if (queue.feeder_gone()) {
    queue.finish(TcpPrefix::Then::kError, ECONNRESET);
    return in;
  }
  if (std::shared_ptr<const int> wake = queue.wake()) {
    *bell = {*wake, POLLIN, 0};
    try {
      bells->push_back(std::move(wake));
    } catch (const std::bad_alloc&) {
      *bell = {-1, 0, 0};
      return in;  // nothing to sleep on: said ready, and a read finds out (EAGAIN, or it waits)
    }
  }
  return 0;
}

}  // namespace tcp2rdma::preload
