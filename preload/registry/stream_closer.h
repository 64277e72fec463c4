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

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

// Takes the stream (and deletes it once it has ended). `linger_seconds` as SO_LINGER says: 0 resets
// the connection at once, above 0 waits here up to that long (as the kernel's close() does), -1 (off)
// hands the end to the closer's thread.
void close_later(transport::RdmaStream* stream, int linger_seconds) noexcept;
// A stream a forked child still holds (registry/lent_streams.h): instead of its end, the closer's
// thread moves it back to TCP and keeps the answer for the child (hand_back); then it goes.
void hand_back_later(transport::RdmaStream* stream, uint64_t serial) noexcept;
// Waits for every stream handed over so far to have ended (bounded by their timeouts).
void finish_closing() noexcept;
// In a forked child: the streams being closed are the parent's; the child forgets them.
void forget_closing_after_fork() noexcept;

}  // namespace tcp2rdma::preload
