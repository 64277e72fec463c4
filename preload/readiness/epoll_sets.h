// epoll with upgraded descriptors. The application's epoll set cannot watch an upgraded connection's
// kernel socket (it stays idle); instead the stream is entered under the record of its link in that
// set (epoll_entries.h: one registration in the kernel's set per (set, link), with the record's
// address as the event data), and epoll_wait translates: a record that fires names the entries whose
// streams had news, and each that has events the application asked for is reported with the
// application's own events and data. A set without upgraded descriptors costs one atomic load per
// epoll_wait.
#pragma once

#include <sys/epoll.h>

namespace tcp2rdma::preload {

class TrackedSocket;

// epoll_ctl for an upgraded fd (its stream is not null). Returns the result epoll_ctl returns.
int epoll_ctl_upgraded(int epfd, int op, int fd, epoll_event* event) noexcept;

// A thread in an epoll wait on epfd, counted from before it looks whether the set is the module's
// until it is back from the kernel's wait, unless the module's path takes the wait (leave()). While a
// thread may sleep in the kernel's wait on a set alone, no report is carried to that set's next wait
// in the module's state (epoll_carried.cpp): a ready registration added meanwhile must wake it, as
// the kernel's would; and no take is lazy (epoll_entries.h). The transport's own waits are not counted
// (own_calls.h).
class EpollWaiter {
 public:
  explicit EpollWaiter(int epfd) noexcept;
  ~EpollWaiter() { leave(); }
  EpollWaiter(const EpollWaiter&) = delete;
  EpollWaiter& operator=(const EpollWaiter&) = delete;
  void leave() noexcept;

 private:
  int epfd_;
  bool counted_ = false;
};

// epoll_wait and its variants, when epfd holds upgraded descriptors; `wait` makes the real call
// (with the given timeout in milliseconds, -1 for none). Returns false when epfd holds none: the
// caller makes the real call itself, `waiter` counting it.
using RealEpollWait = int (*)(int epfd, epoll_event* events, int maxevents, int timeout_ms, const void* context);
bool epoll_wait_upgraded(int epfd, epoll_event* events, int maxevents, int timeout_ms, RealEpollWait wait,
                         const void* context, EpollWaiter& waiter, int* result) noexcept;

// After the kernel's wait that epoll_wait_upgraded left to the caller (`rc` its result): a record of
// ours that came into the set meanwhile (another thread added an upgraded connection, or an upgrade
// moved a registration onto its stream) may be among the events, its data ours, not the
// application's. They are taken out, and when nothing else is left the wait goes on through the
// module's path (from the start of `timeout_ms`: a wait so ended may last longer than asked).
int epoll_lone_wait_result(int epfd, epoll_event* events, int maxevents, int rc, int timeout_ms, RealEpollWait wait,
                           const void* context, EpollWaiter& waiter) noexcept;

// After a successful real epoll_ctl on a socket that is not upgraded: when the socket's upgrade is
// still pending (a non-blocking connect under way), remember the registration, so that the upgrade
// can move it onto the stream (epoll_move_pending); when the socket is back on TCP with a prefix,
// remember it so that epoll_wait reports the prefix. Otherwise a no-op.
void epoll_note_registration(int epfd, int op, int fd, const epoll_event* event) noexcept;

// fd's pending upgrade ended: if it `upgraded`, its remembered registrations leave the idle socket
// and watch the stream instead; either way they are forgotten.
void epoll_move_pending(int fd, bool upgraded) noexcept;

// The socket's connection went back to TCP (move_back.h): each of its registrations leaves the
// stream's record and watches the socket itself again, as the application made it. While the
// socket has a prefix to read first, the registrations that ask for EPOLLIN are reported readable
// without waiting (the kernel cannot know of those bytes).
// fd's socket goes back to TCP now (registry/connection_path.h, mark_connection_back_on_tcp, with
// `by_mover` as there), under the epoll lock so that a waiter sees the path and the registrations
// change together: true for the one call that made it so.
bool epoll_move_back(TrackedSocket* socket, int fd, bool by_mover) noexcept;

// Whether a poller other than the set's own waits may see an epoll set's readiness
// (epoll_carried.cpp): the process made set epfd (epoll_create); fd, given to poll, select or
// epoll_ctl, is watched by a poller (a no-op unless fd is such a set); fd, an epoll set or not, was
// closed.
void epoll_note_set_made(int epfd) noexcept;
void epoll_note_watched(int fd) noexcept;
void epoll_note_set_gone(int fd) noexcept;

// Whether an epoll set of this process waits for the stream's input (a registration with EPOLLIN):
// a read relay would leave it unwoken (back_to_tcp/read_relay.h).
bool epoll_watches_input(const void* stream) noexcept;

// fd was closed: forget its registrations (the kernel forgets the socket's).
void epoll_forget_fd(int fd) noexcept;
// epfd was closed.
void epoll_forget_set(int epfd) noexcept;
// Around the real fork: the lock of the epoll bookkeeping is held, so that no other thread is in the
// middle of changing it when the child gets its copy (the child has none of those threads); idle
// records leave their sets first (epoll_records.cpp).
void epoll_hold_for_fork() noexcept;
void epoll_release_after_fork() noexcept;

}  // namespace tcp2rdma::preload
