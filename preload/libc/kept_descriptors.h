// The module's descriptors that the application's close_range(), closefrom() and close() must leave
// open: the ones a forked child needs until its exec (the channel to its parent, the listener
// directories' memfds) and the log.
//
// A server that forks a process per connection often closes every descriptor above 2 in the child
// before it execs the service (openbsd-inetd calls close_range(3, ~0U, 0); daemons and Python's
// subprocess do the same). The application never opened these and cannot name them on purpose; taking
// them made the child's claim of its connection fail (its parent's answer could not be heard), and
// the module then reset the connection: every inetd service under the module was reset.
//
// A fixed table of atomic slots, no lock: a forked child reads it at once, whatever thread of the
// parent was in the middle of a change. The module marks a descriptor kept right after it made it and
// unmarks it before it closes it.
#pragma once

namespace tcp2rdma::preload {

// Marks fd as the module's own (nothing happens for a negative fd, or when the table is full: the
// descriptor is then as exposed as any other).
void keep_from_application(int fd) noexcept;
// Unmarks fd, before the module closes it or hands the number on.
void release_to_application(int fd) noexcept;
// Whether fd is marked.
bool kept_from_application(int fd) noexcept;
// The lowest marked descriptor in [first, last], or -1.
int first_kept_in(unsigned first, unsigned last) noexcept;

}  // namespace tcp2rdma::preload
