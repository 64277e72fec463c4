// Readiness. Until a descriptor's stream moves to RDMA the kernel's own readiness is the truth, so
// these calls go straight to libc.
#include <cerrno>

#include "interposed.h"

using tcp2rdma::preload::real;

T2R_INTERPOSE int poll(struct pollfd* fds, nfds_t nfds, int timeout) { return real().poll(fds, nfds, timeout); }

T2R_INTERPOSE int __poll_chk(struct pollfd* fds, nfds_t nfds, int timeout, size_t fdslen) {
  return real().__poll_chk(fds, nfds, timeout, fdslen);
}

T2R_INTERPOSE int ppoll(struct pollfd* fds, nfds_t nfds, const struct timespec* timeout, const sigset_t* sigmask) {
  return real().ppoll(fds, nfds, timeout, sigmask);
}

T2R_INTERPOSE int __ppoll_chk(struct pollfd* fds, nfds_t nfds, const struct timespec* timeout,
                              const sigset_t* sigmask, size_t fdslen) {
  return real().__ppoll_chk(fds, nfds, timeout, sigmask, fdslen);
}

T2R_INTERPOSE int select(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, struct timeval* timeout) {
  return real().select(nfds, rd, wr, ex, timeout);
}

T2R_INTERPOSE int pselect(int nfds, fd_set* rd, fd_set* wr, fd_set* ex, const struct timespec* timeout,
                          const sigset_t* sigmask) {
  return real().pselect(nfds, rd, wr, ex, timeout, sigmask);
}

T2R_INTERPOSE int epoll_create(int size) { return real().epoll_create(size); }

T2R_INTERPOSE int epoll_create1(int flags) { return real().epoll_create1(flags); }

T2R_INTERPOSE int epoll_ctl(int epfd, int op, int fd, struct epoll_event* event) {
  return real().epoll_ctl(epfd, op, fd, event);
}

T2R_INTERPOSE int epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout) {
  return real().epoll_wait(epfd, events, maxevents, timeout);
}

T2R_INTERPOSE int epoll_pwait(int epfd, struct epoll_event* events, int maxevents, int timeout,
                              const sigset_t* sigmask) {
  return real().epoll_pwait(epfd, events, maxevents, timeout, sigmask);
}

T2R_INTERPOSE int epoll_pwait2(int epfd, struct epoll_event* events, int maxevents, const struct timespec* timeout,
                               const sigset_t* sigmask) {
  if (real().epoll_pwait2 == nullptr) {  // glibc older than 2.35
    errno = ENOSYS;
    return -1;
  }
  return real().epoll_pwait2(epfd, events, maxevents, timeout, sigmask);
}
