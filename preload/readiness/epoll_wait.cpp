// epoll_wait with upgraded descriptors: the translation of the kernel's events for the readiness fds
// into the application's own, and the level-triggered and prefixed registrations reported without a
// kernel event (epoll_sets.h).
#include "deadline.h"
#include "readiness/epoll_sets.h"

#include <cerrno>
#include <chrono>
#include <mutex>
#include <new>
#include <vector>

#include "libc/real_calls.h"
#include "own_calls.h"
#include "rdma_stream.h"
#include "readiness/epoll_entries.h"
#include "readiness/stream_events.h"
#include "registry/connection_path.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "route/route.h"

namespace tcp2rdma::preload {
namespace {

using namespace epoll_detail;
using transport::Deadline;

// Whether descriptor fd's connection is being moved back by another thread.
bool moving_back(int fd) {
  SocketHold socket = SocketHold::of(fd);
  return socket && socket->moving_back();
}

// The prefixed registrations of epfd whose prefix is there: reported into events[n...], up to
// maxevents; returns the new n. Edge-triggered and one-shot ones are reported once, the others while
// the prefix lasts; one whose prefix is gone is forgotten (the kernel reports the socket from then on).
int report_prefixed_locked(int epfd, epoll_event* events, int n, int maxevents) {
  for (size_t i = g_prefixed.size(); i-- > 0 && n < maxevents;) {
    Prefixed p = g_prefixed[i];
    if (p.epfd != epfd) continue;
    SocketHold socket = SocketHold::of(p.fd);
    if (!socket || !socket->prefix.present()) {
      erase_prefixed_locked(i);
      continue;
    }
    auto wanted = static_cast<short>(p.event.events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI));
    events[n++] = {static_cast<uint16_t>(prefixed_poll_events(p.fd, wanted)), p.event.data};
    if (p.event.events & (EPOLLET | EPOLLONESHOT)) {
      erase_prefixed_locked(i);
      if (p.event.events & EPOLLONESHOT) {
        epoll_event off{EPOLLONESHOT, p.event.data};
        real().epoll_ctl(epfd, EPOLL_CTL_MOD, p.fd, &off);  // disarmed, as the kernel does once it fired
      }
    }
  }
  return n;
}


}  // namespace

bool epoll_wait_upgraded(int epfd, epoll_event* events, int maxevents, int timeout_ms, RealEpollWait wait,
                         const void* context, int* result) noexcept {
  if ((g_count.load(std::memory_order_acquire) == 0 && g_pending_count.load(std::memory_order_acquire) == 0 &&
       g_prefixed_count.load(std::memory_order_acquire) == 0) ||
      maxevents <= 0 || transport::OwnCalls::active()) {  // the transport's own sleep (own_calls.h)
    return false;
  }
  // Scratch kept per thread: an event loop calls this for every wakeup, and it should not allocate.
  static thread_local std::vector<Entry*> mine, reported;
  // A set that holds a socket whose upgrade is pending takes this path too: the upgrade may move that
  // registration onto its stream while we wait, and the event that then comes carries our Entry.
  auto take_mine = [&] {
    mine.clear();
    bool pending = false;
    for (Entry* e : g_entries) {
      if (e->epfd == epfd) mine.push_back(e);
    }
    for (const Pending& p : g_pending) pending |= p.epfd == epfd;
    for (const Prefixed& p : g_prefixed) pending |= p.epfd == epfd;
    return pending || !mine.empty();
  };
  {
    std::lock_guard lock(g_mutex);
    if (!take_mine()) return false;
  }
  const int saved_errno = errno;
  auto deadline = Deadline::in_ms(timeout_ms);
  // A connection that another thread is moving back to TCP (a fork): its registrations are moved
  // when that thread is done, and the prefix it keeps is no kernel event, so we look every
  // millisecond until then.
  int awaited_fd = -1;
  for (;;) {
    std::lock_guard lock(g_mutex);  // entries may not go away while we look at them
    take_mine();
    if (awaited_fd >= 0 && !moving_back(awaited_fd)) awaited_fd = -1;
    int n = 0;
    reported.clear();
    // Level-triggered entries are reported while their stream is ready, fired or not: the readiness
    // fd only signals changes.
    // (Edge-triggered ones are looked at only when their fd fired: a look would take the event.)
    bool moved = false;
    for (Entry* e : mine) {
      if (n == maxevents || !alive_locked(e) || e->disabled || (e->events & EPOLLET)) continue;
      bool gone = false;
      uint32_t ev = ready_events(*e, &gone);
      if (gone) {
        if (!move_back_now_locked(e)) awaited_fd = e->fd;
        moved = true;
        continue;
      }
      if (ev == 0) continue;
      events[n++] = {ev, e->data};
      reported.push_back(e);
      if (e->events & EPOLLONESHOT) e->disabled = true;
    }
    if (moved) take_mine();
    const int prefixed_from = n;
    n = report_prefixed_locked(epfd, events, n, maxevents);
    const int prefixed_to = n;
    int wait_ms = n > 0 ? 0 : deadline.poll_ms();
    if (awaited_fd >= 0 && wait_ms != 0) wait_ms = 1;
    int rc = 0;
    if (n < maxevents) {
      g_mutex.unlock();
      rc = wait(epfd, events + n, maxevents - n, wait_ms, context);
      g_mutex.lock();
      take_mine();  // an upgrade may have moved a registration meanwhile
    }
    if (rc < 0) {
      *result = n > 0 ? n : -1;
      return true;
    }
    int out = n;
    for (int i = n; i < n + rc; ++i) {
      epoll_event got = events[i];
      Entry* e = nullptr;
      for (Entry* candidate : mine) {
        if (candidate == got.data.ptr && alive_locked(candidate)) e = candidate;
      }
      if (e == nullptr && ours_locked(got.data.ptr)) continue;  // a registration gone meanwhile (retired())
      if (e == nullptr) {
        // The application's own descriptor; one reported for its prefix already gets the kernel's
        // events added, not a second entry.
        bool merged = false;
        for (int j = prefixed_from; j < prefixed_to && !merged; ++j) {
          if (events[j].data.u64 == got.data.u64) {
            events[j].events |= got.events;
            merged = true;
          }
        }
        if (!merged) events[out++] = got;
        continue;
      }
      bool already = false;
      for (Entry* r : reported) already |= r == e;
      if (already || e->disabled) continue;
      bool gone = false;
      uint32_t ev = ready_events(*e, &gone);
      if (gone) {
        // Its registration is the socket's again: the next real wait reports what the socket has.
        if (!move_back_now_locked(e)) awaited_fd = e->fd;
        take_mine();
        continue;
      }
      if (ev != 0) {
        events[out++] = {ev, e->data};
        reported.push_back(e);
        if (e->events & EPOLLONESHOT) e->disabled = true;
      }
    }
    if (out > 0 || (wait_ms == 0 && awaited_fd < 0) || (awaited_fd >= 0 && deadline.passed())) {
      for (Entry* e : reported) keep_signalled(*e);
      *result = out;
      errno = saved_errno;  // success leaves errno alone, as the kernel's epoll_wait does
      return true;
    }
    // Only readiness fds fired, with nothing the application asked for: wait again.
  }
}


}  // namespace tcp2rdma::preload
