// The path watcher: one thread per process that looks after the RDMA path of every connection this
// process put on RDMA, and fails a connection over to TCP when its path fails (failover.h;
// docs/protocol.md, "When the RDMA path fails").
//
// Why a thread: an event-loop application is never blocked in a call on an idle connection, so
// nothing of its own would notice a dead path, or the peer's failover record arriving on TCP. The
// watcher holds every such connection's TCP socket in one epoll set (silent while the connection is on
// RDMA: a byte or an end there is the peer's record or its death), probes each idle connection's path
// every keepalive interval (a zero-byte RDMA Write, RdmaStream::check_path), and drives every
// failover as a non-blocking state machine. No thread per connection; while all is well it sleeps
// until the next probe is due.
#pragma once

namespace tcp2rdma::preload {

class TrackedSocket;

// A connection just put on RDMA (the switch): watched from now on. The first one starts the watcher.
void watch_path(TrackedSocket* socket, int fd) noexcept;

// What an application's call on a connection whose path failed (the stream said kPathFailed) is to do.
enum class FailoverWait {
  kOver,         // the failover is over: route the call again (TCP, or the stream's reset)
  kWouldBlock,   // a non-blocking call: EAGAIN; the pollers are woken when it is over
  kInterrupted,  // a signal handler ran and the call must fail with EINTR (signal_restart.h)
};
// Has the failover begin if it has not (the watcher runs it), then waits for it to end, or returns
// kWouldBlock at once when `nonblocking`. Without a watcher (no thread to be had) the stream is reset.
FailoverWait await_failover(TrackedSocket* socket, int fd, bool nonblocking) noexcept;

// A write that said more follows (TCP_CORK, MSG_MORE) left a message held on the socket's stream:
// the watcher pushes it if the application has not within 100 to 200 ms, as the kernel sends a
// corked segment after 200 ms (held_pushes.cpp). Costs an atomic while the socket is listed.
void push_held_later(TrackedSocket* socket) noexcept;

// In a forked child: the watcher, its lock and its epoll set are the parent's; the child starts its own
// at its first connection on RDMA.
void forget_path_watcher_after_fork() noexcept;
// After a change of credentials (interpose/credentials.cpp): the watcher's thread lived through it and
// has a cred object of its own, so its keepalives on links made from now on would be refused (EACCES
// on rxe's doorbell). It ends; the next connection to watch starts a new one from the thread that
// made the change.
void retire_path_watcher() noexcept;

}  // namespace tcp2rdma::preload
