// Bookkeeping that keeps the fd table in step with the kernel's descriptor table: what socket(),
// accept(), dup*(), fcntl(F_DUPFD*), close() and close_range() did to descriptors is mirrored here
// right after the real call succeeded (closing: before it, see untrack). None of these functions
// changes errno.
#pragma once

#include <mutex>

#include <vector>

#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

// A stream socket of an IP family: the only kind a rule can move onto RDMA.
bool is_tcp_candidate(int domain, int type, int protocol) noexcept;

// fd is a new descriptor for a new socket.
void track_new_socket(int fd, int domain, SocketRole role) noexcept;

// new_fd now refers to the same socket as old_fd (dup, dup2, dup3, F_DUPFD); whatever new_fd referred
// to before was closed by the kernel.
void track_duplicate(int old_fd, int new_fd) noexcept;

// fd was closed.
void track_close(int fd) noexcept;

// What close() and close_range() do instead of track_close, in this order: take the descriptors'
// entries out of the table (untrack), make the real call, then let go of them (release()). The kernel
// gives a closed number to the next descriptor anyone opens, this module's or librdmacm's among them,
// so the entry must be gone before the number is free: a new descriptor must never meet the old
// socket's state (its stream, its session), which would carry the new descriptor's bytes on another
// connection (own_calls.h tells what that once did).
TrackedSocket* untrack(int fd) noexcept;
std::vector<TrackedSocket*> untrack_range(unsigned first, unsigned last) noexcept;

// A thread that uses an application's descriptor number after checking that it still names a
// connection (the path watcher: a peek at the connection's TCP socket, a dup for its failover) holds
// this across the check and the use, and the module frees the number of a connection on RDMA or
// failing over (close, dup2 or dup3 onto it; close_range, any number) under it: no free of the number, and no reuse of it by another socket, can fall
// between a check and its use (the watcher would peek at, or fail over on, someone else's socket;
// ThreadSanitizer saw the close and the peek race). Held for a system call or two, never while
// anything else is waited for.
[[nodiscard]] std::unique_lock<std::mutex> hold_descriptor_numbers() noexcept;
// The fork wrapper takes it around the real fork, so that no child inherits it held by a thread the
// child does not have.
void numbers_hold_for_fork() noexcept;
void numbers_release_after_fork() noexcept;

}  // namespace tcp2rdma::preload
