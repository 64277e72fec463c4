// Pre-fork servers (nginx, Apache's prefork): a process listens, forks, and its children accept. Only
// one process can hold the rdma_cm listener on a port, and a child must never use its parent's RDMA
// resources. So the RDMA listener goes to the processes that accept: a process that forks without
// ever having accepted on a listener drops its RDMA listener in the parent, and the first process of
// the family that then accepts on the listener (or adds it to an epoll set, as event-driven workers
// do before their first accept) takes the listener's port. Every other process that accepts listens
// on an rdma_cm port of its own, and the holder of the listener's port sends it the requests of the
// connections it accepted (the directory: listener_directory.h, directory_service.h).
#pragma once

#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

// Before fork: makes the directory of each listener with an RDMA listener here (once), and marks
// those this process holds the RDMA listener of but never accepted on.
void mark_listeners_to_hand_on() noexcept;
// After fork, in the parent (or after a failed fork): drops the marked RDMA listeners (or unmarks);
// a parent that keeps a listener's port starts answering for its children.
void hand_on_marked_listeners(bool forked) noexcept;
// Around posix_spawn that hands a server connection to the new program (process/spawn_guard.h): the
// directory of each listener this process accepts on with an RDMA listener here (once), so that the
// new program can have the return of the connection's client sent to a port of its own; after the
// spawn, this process answers for it as a forking server answers for its children.
void prepare_listeners_for_spawn() noexcept;
void serve_listeners_after_spawn() noexcept;
// Before a change of this process's credentials (interpose/credentials.cpp): every RDMA listener of
// this process is destroyed while its rdma_cm descriptor still answers, and made again, under the new
// credentials, at the next accept or epoll registration (claim_rdma_listener), as a pre-fork worker's.
void drop_listeners_for_credentials() noexcept;
// In a forked child: the listeners' locks are made anew. A thread of the parent (the directory's, a
// background accept) may have held one at the fork, and that thread does not exist here.
void renew_listener_locks() noexcept;
// At an accept (or epoll registration) on `listener` in any process of a forked family: makes this
// process's RDMA listener, on the listener's port if no live process holds it, else on a port of its
// own.
void claim_rdma_listener(int fd, TrackedSocket* listener) noexcept;

}  // namespace tcp2rdma::preload
