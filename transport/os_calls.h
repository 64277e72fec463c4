// The system calls the transport makes on its own descriptors (epoll sets, eventfds, event channels),
// through one table instead of the PLT.
//
// Linked into libtcp2rdma.so, a plain call to close() or epoll_wait() from here would reach the
// module's own wrappers, which the module exports for the whole process: a stream's destructor would
// run the close wrapper, perhaps while the epoll bookkeeping's lock is held. The table holds the next
// definition after the object the transport is linked into (dlsym(RTLD_NEXT)): inside the module that
// is exactly the call the wrappers themselves make (preload's real()); in any other program it is
// libc's (or a sanitizer's interceptor in front of it). tests/transport/check_os_calls.sh checks that
// the transport's objects reference no interposed call directly.
//
// librdmacm and libibverbs still call libc through the PLT for the transport; own_calls.h covers those.
#pragma once

#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>

namespace tcp2rdma::transport {

struct OsCalls {
  int (*close)(int fd);
  int (*fcntl)(int fd, int cmd, ...);
  int (*poll)(pollfd* fds, nfds_t nfds, int timeout_ms);
  int (*epoll_create1)(int flags);
  int (*epoll_ctl)(int epfd, int op, int fd, epoll_event* event);
  int (*epoll_wait)(int epfd, epoll_event* events, int maxevents, int timeout_ms);
  // RLIMIT_NOFILE's wrappers wait for the module's own descriptor window (own_descriptors.h), which
  // holds its lock while it calls these.
  int (*getrlimit)(__rlimit_resource_t resource, rlimit* limit);
  int (*setrlimit)(__rlimit_resource_t resource, const rlimit* limit);
};

// Resolved once, on first use (any thread; a constructor resolves it at load).
const OsCalls& os() noexcept;

}  // namespace tcp2rdma::transport
