// A connection passed to another process in an SCM_RIGHTS message (docs/architecture.md, "A
// connection passed to another process"): Node's cluster module in its default mode, servers built on
// multiprocessing's send_handle, master/worker designs that hand accepted connections out. The
// receiver gets the kernel's socket and nothing of this process's memory, so before the real
// sendmsg, for every connection socket the message carries:
//  - an upgrade still on TCP stays there (its session is settled, a deferred one given up);
//  - one on RDMA goes back to TCP (its rule's on_fork: tcp, as at exec), and the receiver reads it
//    from the kernel; one lent by our parent is claimed first;
//  - one that cannot go (the move failed, on_fork: parent, or the peer's bytes already on the stream
//    and unread here, which the receiver could never read) is reset: the peer and the receiver see
//    the reset, never a clean end with bytes missing;
//  - the socket is marked as another process's too (ForkShare::note_passed): it never returns to RDMA
//    here.
#pragma once

#include <sys/socket.h>

namespace tcp2rdma::preload {

// Before sendmsg on `via`, a descriptor that is not a connection of ours: the connections among msg's
// SCM_RIGHTS descriptors, if `via` is a unix socket. The caller looks at msg_controllen first (the
// only cost of a message without control data).
void before_passing_descriptors(int via, const msghdr* msg) noexcept;

}  // namespace tcp2rdma::preload
