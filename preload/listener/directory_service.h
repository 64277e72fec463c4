// The holder's half of a pre-fork server's directory (listener_directory.h): the process holding the
// rdma_cm listener on the listener's port runs a thread that answers every request for a connection
// another process of the server accepted with a redirect to that process's own port. The thread is
// needed because the holder's application may be busy or asleep in epoll_wait while other processes
// accept: nothing else would look at the holder's listener then.
#pragma once

namespace tcp2rdma::preload {
struct ListenerState;
}

namespace tcp2rdma::preload {

// Starts the thread for `listener` (fd names it) in this process, unless it runs already.
void start_directory_service(int fd, ListenerState* listener) noexcept;
// Stops and joins this process's thread for `listener`, if any.
void stop_directory_service(ListenerState* listener) noexcept;
// The listener is going (its last descriptor closed): stops the thread, gives up the holder's place
// when this process held the port, and unmaps this process's view of the directory.
void forget_directory(ListenerState* listener) noexcept;

}  // namespace tcp2rdma::preload
