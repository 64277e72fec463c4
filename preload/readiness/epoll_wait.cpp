// epoll_wait with upgraded descriptors (epoll_sets.h): the lock, the kernel's sleep and its deadline,
// and the moves back to TCP; which registrations are reported, and how, is the report's
// (epoll_report.h).
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
#include "readiness/epoll_report.h"
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
  return socket && socket->being_moved();
}

// What an entry's stream has now (epoll_report.h).
Look look_now(const Entry& e) {
  Look look;
  look.events = ready_events(e, &look.moved);
  return look;
}

// The prefixed registrations of epfd whose prefix is there, reported without a kernel event.
// Edge-triggered and one-shot ones are reported once, the others while the prefix lasts; one whose
// prefix is gone is forgotten (the kernel reports the socket from then on).
void report_prefixed_locked(int epfd, EpollReport& report) {
  for (size_t i = g_prefixed.size(); i-- > 0 && !report.full();) {
    Prefixed p = g_prefixed[i];
    if (p.epfd != epfd) continue;
    SocketHold socket = SocketHold::of(p.fd);
    if (!socket || !socket->prefix.present()) {
      erase_prefixed_locked(i);
      continue;
    }
    auto wanted = static_cast<short>(p.event.events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI));
    report.report_unfired({static_cast<uint16_t>(prefixed_poll_events(p.fd, wanted)), p.event.data});
    if (p.event.events & (EPOLLET | EPOLLONESHOT)) {
      erase_prefixed_locked(i);
      if (p.event.events & EPOLLONESHOT) {
        epoll_event off{EPOLLONESHOT, p.event.data};
        real().epoll_ctl(epfd, EPOLL_CTL_MOD, p.fd, &off);  // disarmed, as the kernel does once it fired
      }
    }
  }
}

// A fired event's registrations (epoll_report.h, Expand): for a record of ours registered in epfd,
// the entries its news names: the link's events taken first (they tell its channels), then the news
// list, each entry that is still registered through this record once. A stale name (an entry that
// went, or was reused elsewhere: a stream that lingers may still tell it) is dropped.
bool expand_record(const void* data, int epfd, std::vector<Entry*>* looks) {
  bool ours = false;
  Record* r = live_record_locked(data, epfd, &ours);
  if (r == nullptr) {
    if (ours) drop_if_idle_locked(data, epfd);  // level-triggered: it would fire again and again
    return ours;
  }
  static thread_local std::vector<void*> news;
  if (!r->watch.take(&news)) {
    // Some news was lost to a lack of memory: every entry of the record is looked at.
    for (Entry* e : g_entries) {
      if (e->record == r) looks->push_back(e);
    }
    return true;
  }
  for (void* tag : news) {
    Entry* e = live_locked(tag);
    if (e != nullptr && e->record == r) looks->push_back(e);
  }
  return true;
}

// The entries the report found gone back to TCP leave their records for their sockets; one
// whose connection another thread is moving (a fork) is awaited.
void move_gone_locked(std::vector<Entry*>& gone, int* awaited_fd) {
  for (Entry* e : gone) {
    if (!alive_locked(e)) continue;  // moved already, with another descriptor of the same socket
    if (!move_back_now_locked(e)) *awaited_fd = e->fd;
  }
  gone.clear();
}


}  // namespace

bool epoll_wait_upgraded(int epfd, epoll_event* events, int maxevents, int timeout_ms, RealEpollWait wait,
                         const void* context, EpollWaiter& waiter, int* result) noexcept {
  if ((g_count.load(std::memory_order_acquire) == 0 && g_pending_count.load(std::memory_order_acquire) == 0 &&
       g_prefixed_count.load(std::memory_order_acquire) == 0 && g_idle_records.load(std::memory_order_acquire) == 0) ||
      maxevents <= 0 || transport::OwnCalls::active()) {  // the transport's own sleep (own_calls.h)
    return false;
  }
  // Scratch kept per thread: an event loop calls this for every wakeup, and it should not allocate.
  static thread_local EpollReport report;
  // A set that holds a socket whose upgrade is pending takes this path too: the upgrade may move that
  // registration onto its stream while we wait, and the event that then comes carries our record.
  {
    std::lock_guard lock(g_mutex);
    bool mine = registrations_in_set_locked(epfd) > 0;
    for (size_t i = 0; i < g_pending.size() && !mine; ++i) mine = g_pending[i].epfd == epfd;
    for (size_t i = 0; i < g_prefixed.size() && !mine; ++i) mine = g_prefixed[i].epfd == epfd;
    if (!mine) return false;
  }
  waiter.leave();  // counted as the set's own sleeper instead (note_sleeper_locked)
  const int saved_errno = errno;
  auto deadline = Deadline::in_ms(timeout_ms);
  // A connection that another thread is moving back to TCP (a fork): its registrations are moved
  // when that thread is done, and the prefix it keeps is no kernel event, so we look every
  // millisecond until then.
  int awaited_fd = -1;
  for (;;) {
    std::lock_guard lock(g_mutex);  // entries may not go away while we look at them
    if (awaited_fd >= 0 && !moving_back(awaited_fd)) awaited_fd = -1;
    report.start(events, maxevents, look_now);
    report_prefixed_locked(epfd, report);
    // What the last waits reported level-triggered, looked at again from state (epoll_carried.cpp).
    report_carried_locked(epfd, report);
    int wait_ms = report.count() > 0 ? 0 : deadline.poll_ms();
    if (awaited_fd >= 0 && wait_ms != 0) wait_ms = 1;
    int rc = 0, wait_errno = 0;
    if (!report.full()) {
      note_sleeper_locked(epfd, +1);
      g_mutex.unlock();
      rc = wait(epfd, events + report.count(), maxevents - report.count(), wait_ms, context);
      wait_errno = errno;
      g_mutex.lock();
      note_sleeper_locked(epfd, -1);
    }
    if (rc >= 0) report.translate_fired(rc, epfd, expand_record);
    // News that found no room is looked at next time (the record stays readable meanwhile).
    for (Entry* e : report.unlooked()) e->record->watch.push(e);
    if (rc < 0) {
      keep_reported_locked(epfd, report.reported());
      *result = report.count() > 0 ? report.count() : -1;
      errno = wait_errno;
      return true;
    }
    // Their registrations are the sockets' again: the next real wait reports what the sockets have.
    move_gone_locked(report.take_gone(), &awaited_fd);
    if (report.count() > 0 || (wait_ms == 0 && awaited_fd < 0) || (awaited_fd >= 0 && deadline.passed())) {
      keep_reported_locked(epfd, report.reported());
      *result = report.count();
      errno = saved_errno;  // success leaves errno alone, as the kernel's epoll_wait does
      return true;
    }
    // Only records fired, with nothing the application asked for: wait again.
  }
}

int epoll_lone_wait_result(int epfd, epoll_event* events, int maxevents, int rc, int timeout_ms, RealEpollWait wait,
                           const void* context, EpollWaiter& waiter) noexcept {
  waiter.leave();
  // A process that never made a record has none to meet. Else the lock: a thread that registers a
  // record holds it from the kernel's EPOLL_CTL_ADD (which may wake us at once) until its
  // bookkeeping knows the record.
  if (rc <= 0 || !g_records_made.load(std::memory_order_acquire)) return rc;
  const int saved_errno = errno;
  int kept = 0;
  {
    std::lock_guard lock(g_mutex);
    for (int i = 0; i < rc; ++i) {
      bool ours = false;
      live_record_locked(events[i].data.ptr, epfd, &ours);
      if (!ours) events[kept++] = events[i];
    }
  }
  if (kept > 0 || kept == rc) return kept;
  int result = 0;
  if (!epoll_wait_upgraded(epfd, events, maxevents, timeout_ms, wait, context, waiter, &result)) {
    errno = saved_errno;
    return 0;  // the set holds nothing of ours any more: the record went with its last entry
  }
  return result;
}

}  // namespace tcp2rdma::preload
