// epoll: upgraded descriptors are translated (readiness/epoll_sets.h); sets without them go straight
// to libc. poll and select are interpose/poll.cpp's.
#include <sys/epoll.h>

#include <cerrno>

#include "back_to_tcp/read_relay.h"
#include "data/stream_calls.h"
#include "libc/interposed.h"
#include "listener/prefork_listeners.h"
#include "readiness/epoll_sets.h"
#include "registry/fd_table.h"
#include "registry/upgrade_session.h"

using tcp2rdma::preload::real;
using tcp2rdma::preload::route_for_call;

namespace {

int real_epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout_ms, const void*) {
  return real().epoll_wait(epfd, events, maxevents, timeout_ms);
}

int real_epoll_pwait(int epfd, epoll_event* events, int maxevents, int timeout_ms, const void* sigmask) {
  return real().epoll_pwait(epfd, events, maxevents, timeout_ms, static_cast<const sigset_t*>(sigmask));
}

int timeout_ms_of(const timespec* t) {
  if (t == nullptr) return -1;
  return static_cast<int>(t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000);
}

}  // namespace

T2R_INTERPOSE int epoll_create(int size) {
  int epfd = real().epoll_create(size);
  tcp2rdma::preload::epoll_note_set_made(epfd);
  return epfd;
}

T2R_INTERPOSE int epoll_create1(int flags) {
  int epfd = real().epoll_create1(flags);
  tcp2rdma::preload::epoll_note_set_made(epfd);
  return epfd;
}

T2R_INTERPOSE int epoll_ctl(int epfd, int op, int fd, struct epoll_event* event) {
  auto ref = route_for_call(fd);
  if (auto* session = ref.session()) {
    // Registered on the socket and remembered, in one step with respect to the switch, which moves
    // the remembered registrations onto the stream.
    int rc = 0, error = 0;
    if (session->run_on_tcp([&](uint64_t&, uint64_t&) {
          rc = real().epoll_ctl(epfd, op, fd, event);
          error = errno;
          if (rc == 0) tcp2rdma::preload::epoll_note_registration(epfd, op, fd, event);
        })) {
      errno = error;
      return rc;
    }
    // It moved meanwhile: waits for the switch to end (the socket this call began on).
    ref = route_for_call(tcp2rdma::preload::SocketHold(ref.socket()), fd);
  }
  // A stream a child reads through this process's relay moves back to TCP for a wait on its input.
  bool moved = ref != nullptr && tcp2rdma::preload::moved_back_for_epoll(ref.socket(), fd, op, event);
  if (ref != nullptr && !moved) return tcp2rdma::preload::epoll_ctl_upgraded(epfd, op, fd, event);
  if (op != EPOLL_CTL_DEL) tcp2rdma::preload::epoll_note_watched(fd);  // an epoll set inside another
  int rc = real().epoll_ctl(epfd, op, fd, event);
  if (rc == 0) tcp2rdma::preload::epoll_note_registration(epfd, op, fd, event);
  // An event-driven worker of a pre-fork server adds the listener to its set before its first accept:
  // the moment to make the RDMA listener, before clients' requests arrive.
  if (rc == 0 && op == EPOLL_CTL_ADD) {
    if (auto socket = tcp2rdma::preload::SocketHold::of(fd);
        socket && socket->role() == tcp2rdma::preload::SocketRole::kListener) {
      int saved_errno = errno;
      tcp2rdma::preload::claim_rdma_listener(fd, socket.get());
      errno = saved_errno;
    }
  }
  return rc;
}

T2R_INTERPOSE int epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout) {
  int result = 0;
  tcp2rdma::preload::EpollWaiter waiter(epfd);
  if (tcp2rdma::preload::epoll_wait_upgraded(epfd, events, maxevents, timeout, real_epoll_wait, nullptr, waiter,
                                             &result)) {
    return result;
  }
  int rc = real().epoll_wait(epfd, events, maxevents, timeout);
  return tcp2rdma::preload::epoll_lone_wait_result(epfd, events, maxevents, rc, timeout, real_epoll_wait, nullptr, waiter);
}

T2R_INTERPOSE int epoll_pwait(int epfd, struct epoll_event* events, int maxevents, int timeout,
                              const sigset_t* sigmask) {
  int result = 0;
  tcp2rdma::preload::EpollWaiter waiter(epfd);
  if (tcp2rdma::preload::epoll_wait_upgraded(epfd, events, maxevents, timeout, real_epoll_pwait, sigmask, waiter,
                                             &result)) {
    return result;
  }
  int rc = real().epoll_pwait(epfd, events, maxevents, timeout, sigmask);
  return tcp2rdma::preload::epoll_lone_wait_result(epfd, events, maxevents, rc, timeout, real_epoll_pwait, sigmask,
                                                   waiter);
}

T2R_INTERPOSE int epoll_pwait2(int epfd, struct epoll_event* events, int maxevents, const struct timespec* timeout,
                               const sigset_t* sigmask) {
  if (real().epoll_pwait2 == nullptr) {  // glibc older than 2.35
    errno = ENOSYS;
    return -1;
  }
  int result = 0;
  tcp2rdma::preload::EpollWaiter waiter(epfd);
  if (tcp2rdma::preload::epoll_wait_upgraded(epfd, events, maxevents, timeout_ms_of(timeout), real_epoll_pwait,
                                             sigmask, waiter, &result)) {
    return result;
  }
  int rc = real().epoll_pwait2(epfd, events, maxevents, timeout, sigmask);
  return tcp2rdma::preload::epoll_lone_wait_result(epfd, events, maxevents, rc, timeout_ms_of(timeout), real_epoll_pwait,
                                                   sigmask, waiter);
}
