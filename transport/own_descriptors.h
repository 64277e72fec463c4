// Where the module's own descriptors live: above the application's RLIMIT_NOFILE, never in its range.
//
// Every upgraded connection needs a few descriptors of its own (event channels, eventfds, epoll sets).
// Taken from the application's range they made its own
// socket() and connect() calls fail with EMFILE (seen: 101 of 400 asyncio connections under the
// default limit of 1024), and a low number taken by the module is one that an application expecting
// "the lowest free descriptor" no longer gets. So each is made inside a Window: the soft limit is
// raised for the moment (within the hard limit; root may raise the hard one up to fs.nr_open), the new
// descriptor is moved to a number at or above the application's limit, and the soft limit goes back
// to what the application had. A descriptor above the soft limit stays valid; the application can
// open exactly as many as without the module, and getrlimit tells it what it set. When nothing lies
// above the limit (the hard limit equals the soft one and may not rise: memcached, nginx's
// worker_rlimit_nofile, systemd's LimitNOFILE=N and `ulimit -n N` all set soft = hard, and an
// unprivileged process cannot raise the hard one), the module takes the highest free numbers of the
// application's range instead, at most top_reserve() of them (64, or an eighth of a small limit): the
// application meets EMFILE at most that many descriptors earlier, and past that reserve a connection
// stays TCP (Status::kDescriptors). The module needs O(links) descriptors, not O(connections).
// Not covered: the two descriptors per RDMA device that librdmacm opens itself, once per process, at
// its first use of the device: moving them would race with librdmacm's other users of the context.
#pragma once

#include <cstddef>
#include <mutex>

namespace tcp2rdma::transport {

class OwnDescriptors {
 public:
  // Serialises with every other window of the process (the limit is the process's) and makes room
  // above the application's limit.
  OwnDescriptors() noexcept;
  // Puts the application's soft limit back.
  ~OwnDescriptors();
  OwnDescriptors(const OwnDescriptors&) = delete;
  OwnDescriptors& operator=(const OwnDescriptors&) = delete;

  // Moves fd (just made, in this window) above the application's limit (or, with no room there, to
  // the top of its range), close-on-exec, and returns the new number; the old one is closed. -1 (fd
  // closed, errno EMFILE) when there is no room either way; a negative fd is returned as it is.
  int place(int fd) noexcept;
  // How many descriptors of an application's range of `limit` the module takes at most when nothing
  // lies above it.
  static unsigned long top_reserve(unsigned long limit) noexcept;
  static constexpr unsigned long kTopReserve = 64;
  // The same, but without room above the limit fd stays where it is (a descriptor the user asked for,
  // such as the log file, is better low than missing).
  int place_if_room(int fd) noexcept;

 private:
  int move_up(int fd) noexcept;  // a copy of fd at or above the floor (or at the top below it), or -1
  int move_to_top(int fd) noexcept;  // a copy at the highest free number of the top reserve, or -1

  unsigned long floor_ = 0;  // the application's soft limit
  unsigned long hard_ = 0;   // and its hard one
  unsigned long raised_ = 0;  // the soft limit during the window (0: not raised: no room)
};

// The lock every window holds while the soft limit may be raised: the application's own calls on
// RLIMIT_NOFILE (preload/interpose/limits.cpp) take it, so that none reads the raised limit or sees its
// own change undone.
std::unique_lock<std::mutex> hold_descriptor_limit() noexcept;

// How many of the module's descriptors sit at the top of the application's range now (placed there
// for want of room above its limit, and still open): what the application's range is short by.
// Without any such placement, a load and no system call.
size_t own_descriptors_at_top() noexcept;

// In a forked child, before anything else of the module runs: the lock is made anew (another thread
// may have held it at the fork).
void own_descriptors_after_fork() noexcept;

}  // namespace tcp2rdma::transport
