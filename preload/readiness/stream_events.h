// An upgraded descriptor's readiness in poll(2) terms: what its stream has, or what a socket back on TCP
// has with its prefix. poll, select and epoll report these in place of the idle kernel socket's.
#pragma once

#include <poll.h>

#include <memory>
#include <vector>

namespace tcp2rdma::transport {
class RdmaStream;
struct Readiness;
}

namespace tcp2rdma::preload {

// What a socket in the same state would report to poll(2), among `requested`: readable (bytes, the
// end, or an error) is POLLIN, writable POLLOUT; a failed stream, like a reset socket, is POLLERR and
// POLLHUP whatever was asked, and POLLRDHUP (asked) as the peer's end is.
short poll_events_of(const transport::Readiness& r, short requested) noexcept;

// poll(2) events of the stream now, among `requested` (POLLIN, POLLOUT; POLLHUP and POLLERR always).
// *moved (if given) is set when the stream has moved back to TCP: the socket is to be looked at instead.
// `watched`: an epoll record's watch (transport/link_watch.h) takes the link's events, so the look
// leaves them.
short stream_poll_events(transport::RdmaStream* stream, short requested, bool* moved = nullptr,
                         bool watched = false) noexcept;
// The same for a socket back on TCP with a prefix: readable now, and the kernel's other events.
short prefixed_poll_events(int fd, short requested) noexcept;

class TcpPrefix;
// POLLIN of a relay's queue (back_to_tcp/read_relay.h) among `requested`; when it has none, *bell is
// set to what the call sleeps on for it, whose descriptor `bells` holds for the call.
short relay_poll_input(TcpPrefix& queue, short requested, pollfd* bell, std::vector<std::shared_ptr<const int>>* bells);

}  // namespace tcp2rdma::preload
