// epoll_wait with upgraded descriptors (epoll_sets.h): the lock, the kernel's sleep and its deadline,
// and the moves back to TCP; which registrations are reported, and how, is the report's
// (epoll_report.h).
#include "deadline.h"
#include "readiness/epoll_sets.h"

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "libc/real_calls.h"
#include "own_calls.h"
#include "rdma_stream.h"
#include "spin_pause.h"
#include "stream_link.h"
#include "readiness/epoll_entries.h"
#include "readiness/epoll_report.h"
#include "readiness/spin_budget.h"
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

// The entries of record r named by `news` (every one of r's when `whole` is false: news was lost).
void entries_of_news(Record* r, const std::vector<void*>& news, bool whole, std::vector<Entry*>* looks) {
  if (!whole) {
    for (Entry* e : g_entries) {
      if (e->record == r) looks->push_back(e);
    }
    return;
  }
  for (void* tag : news) {
    Entry* e = live_locked(tag);
    if (e != nullptr && e->record == r) looks->push_back(e);
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
  // The set's waits arm its links before they sleep (arm_before_sleep_locked): the take may leave the
  // queue unarmed, sparing an event loop whose replies come while it spins two system calls a wakeup.
  bool whole = r->watch.take(&news, takes_lazily());
  entries_of_news(r, news, whole, looks);
  return true;
}

// The rule for a wait on epfd's spin: the longest busy_poll_us of its links' channels (0: none),
// whether all of them say adaptive, and whether any of its links' spins gives the CPU away.
int spin_rule_locked(int epfd, bool* adaptive, bool* yields) {
  int us = 0;
  *adaptive = true;
  *yields = false;
  if (const std::vector<Record*>* mine = records_of_set_locked(epfd)) {
    for (Record* r : *mine) {
      if (r->entries == 0) continue;
      us = std::max(us, r->watch.busy_poll_us(adaptive));
      *yields = *yields || r->watch.spin_yields();
    }
  }
  return us;
}

// Before the kernel's sleep: the set's links polled for up to spin_us (`yields`: giving the CPU away
// between polls, as RdmaStream::wait does, for a software device's work: spin_pause.h), and the
// kernel's set looked at without sleeping every few polls, for the application's own descriptors. A
// reply that arrives within the spin costs no arming, no event and no sleep. g_mutex held, and let go
// between polls so that other threads' epoll_ctl and waits get in. Returns -1 when the kernel's set
// gave nothing (the report may hold entries of ours), else the kernel's result, its events written at
// events[report.count()...] for the caller to translate (errno set when negative); *calls_made, the
// system calls it made (yields and looks at the kernel's set).
int spin_locked(int epfd, int spin_us, bool yields, EpollReport& report, epoll_event* events, int maxevents,
                RealEpollWait wait, const void* context, unsigned* calls_made) {
  static thread_local std::vector<void*> news;
  static thread_local std::vector<Entry*> looks;
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  const unsigned look_every = transport::polls_per_look(yields);
  *calls_made = 0;
  for (unsigned polls = 1;; ++polls) {
    looks.clear();
    if (const std::vector<Record*>* mine = records_of_set_locked(epfd)) {
      for (size_t i = 0; i < mine->size(); ++i) {
        Record* r = (*mine)[i];
        if (r->entries == 0) continue;
        bool whole = true;
        if (r->watch.spin(&news, &whole) == 0 && whole && news.empty()) continue;
        entries_of_news(r, news, whole, &looks);
      }
    }
    for (Entry* e : looks) report.report_carried(e);  // reported if the stream has their events now
    if (report.count() > 0 || report.any_gone()) return -1;
    if (polls % look_every == 0) {
      ++*calls_made;
      int rc = wait(epfd, events + report.count(), maxevents - report.count(), 0, context);
      if (rc != 0) return rc;
      if (std::chrono::steady_clock::now() >= until) return -1;
    }
    g_mutex.unlock();
    transport::spin_pause(yields);
    *calls_made += yields;
    g_mutex.lock();
  }
}

// Before the kernel's sleep on epfd: the link of every record armed (an idle one's too: a take of
// ours may have left it unarmed, and the listener's thread waits on it for the next open), and this
// thread counted as relying on its event until end_sleeps (a take by another thread then arms it).
// True when completions came before an arming: the news is on the record's list, and the wait
// that follows is to look rather than sleep.
bool arm_before_sleep_locked(int epfd, std::vector<std::shared_ptr<transport::StreamLink>>* held) {
  bool news = false;
  if (const std::vector<Record*>* mine = records_of_set_locked(epfd)) {
    for (Record* r : *mine) {
      std::shared_ptr<transport::StreamLink> link;
      if (r->watch.arm_for_sleep(&link)) news = true;
      if (link == nullptr) continue;
      try {
        held->push_back(std::move(link));
      } catch (const std::bad_alloc&) {
        transport::LinkWatch::end_sleep(*link);
        r->watch.make_eager();  // uncounted: armed for good instead
      }
    }
  }
  return news;
}

void end_sleeps(std::vector<std::shared_ptr<transport::StreamLink>>* held) {
  for (const auto& link : *held) transport::LinkWatch::end_sleep(*link);
  held->clear();
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
  bool spun = false;  // once a call: a wait that comes back with nothing for the application sleeps
  static thread_local std::vector<std::shared_ptr<transport::StreamLink>> armed;
  static thread_local SpinBudget budget;
  for (;;) {
    std::lock_guard lock(g_mutex);  // entries may not go away while we look at them
    if (awaited_fd >= 0 && !moving_back(awaited_fd)) awaited_fd = -1;
    report.start(events, maxevents, look_now);
    report_prefixed_locked(epfd, report);
    // What the last waits reported level-triggered, looked at again from state (epoll_carried.cpp).
    report_carried_locked(epfd, report);
    int wait_ms = report.count() > 0 ? 0 : deadline.poll_ms();
    if (awaited_fd >= 0 && wait_ms != 0) wait_ms = 1;
    // The kernel's wait: wait_ms, or none when a spin or an arming found news to look at (wait_ms
    // itself stays the caller's: news that the application did not ask for is no end of its wait).
    int kernel_ms = wait_ms;
    int rc = 0, wait_errno = 0;
    bool waited = false;
    if (!report.full() && wait_ms != 0 && !spun) {
      spun = true;
      bool adaptive = true, yields = true;
      int rule_us = spin_rule_locked(epfd, &adaptive, &yields);
      int spin_us = budget.next_us(rule_us, adaptive);
      if (wait_ms > 0) spin_us = std::min(spin_us, wait_ms * 1000);  // never past the caller's timeout
      if (spin_us >= SpinBudget::kLeastUs) {
        unsigned calls = 0;
        rc = spin_locked(epfd, spin_us, yields, report, events, maxevents, wait, context, &calls);
        wait_errno = errno;
        waited = rc != -1;
        if (!waited) rc = 0;
        if (report.count() > 0 || report.any_gone() || rc > 0) {
          budget.caught(static_cast<int>(calls));
          kernel_ms = 0;
        } else {
          budget.ran_out();
        }
      }
    }
    if (!report.full() && !waited) {
      // A sleep relies on the links' events: armed first (a look that found news looks, not sleeps).
      if (kernel_ms != 0 && arm_before_sleep_locked(epfd, &armed)) kernel_ms = 0;
      note_sleeper_locked(epfd, +1);
      if (kernel_ms != 0) budget.sleeping();
      g_mutex.unlock();
      rc = wait(epfd, events + report.count(), maxevents - report.count(), kernel_ms, context);
      wait_errno = errno;
      end_sleeps(&armed);  // without our lock: a link whose last reference this was ends here
      g_mutex.lock();
      note_sleeper_locked(epfd, -1);
      if (kernel_ms != 0) budget.woke(rc > 0);
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
