// Pre-fork servers (nginx, Apache's prefork): a process listens, forks, and its children accept. Only
// one process can hold the rdma_cm listener on a port, and a child must never use its parent's RDMA
// resources. So the RDMA listener goes to the process that accepts: a process that forks without
// ever having accepted on a listener drops its RDMA listener in the parent, and the first process of
// the family that then accepts on the listener (or adds it to an epoll set, as event-driven workers
// do before their first accept) makes its own. Only one can: the others' connections stay TCP.
#pragma once

#include "tracked_socket.h"

namespace tcp2rdma::preload {

// Before fork: marks the listeners this process holds the RDMA listener of but never accepted on.
void mark_listeners_to_hand_on() noexcept;
// After fork, in the parent (or after a failed fork): drops the marked RDMA listeners (or unmarks).
void hand_on_marked_listeners(bool forked) noexcept;
// At an accept (or epoll registration) on `listener` in any process: makes the RDMA listener here
// if an ancestor handed it on and no process of the family has it yet.
void claim_rdma_listener(int fd, TrackedSocket* listener) noexcept;

}  // namespace tcp2rdma::preload
