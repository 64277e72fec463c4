#include "readiness/epoll_sets.h"

#include <cerrno>
#include <chrono>
#include <mutex>
#include <new>
#include <vector>

#include "libc/real_calls.h"
#include "own_calls.h"
#include "rdma_stream.h"
#include "readiness/stream_events.h"
#include "registry/connection_path.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "route/route.h"

namespace tcp2rdma::preload {
namespace {

using Clock = std::chrono::steady_clock;

// One upgraded descriptor in one epoll set, as the application registered it.
struct Entry {
  int epfd;
  int fd;
  int readiness_fd;  // what is registered in the kernel's set instead of the socket
  uint32_t events;   // the application's
  epoll_data_t data; // the application's
  bool disabled;     // EPOLLONESHOT fired; waits for EPOLL_CTL_MOD
};

// A registration of a socket whose upgrade is pending: the kernel set watches the socket itself
// until the upgrade moves it (a non-blocking connect added to epoll before it completed).
struct Pending {
  int epfd;
  int fd;
  epoll_event event;  // the application's
};

// A registration of a socket back on TCP with a prefix to read first (move_back.h): the kernel set
// watches the socket, and epoll_wait reports the prefix itself.
struct Prefixed {
  int epfd;
  int fd;
  epoll_event event;  // the application's
};

std::mutex g_mutex;
std::vector<Entry*> g_entries;
// Entries no longer registered, kept for reuse and never freed: a thread that was inside the real
// epoll_wait when another thread erased an entry (a move back to TCP at fork, a close) may return
// with that entry's readiness fd event, whose data is the entry's address. Such an event must be
// recognised as ours and dropped, never handed to the application as one of its own registrations
// (seen: a sleeper in epoll_wait got the old entry's address as its data after a fork). Never
// destroyed, and made on first use (a wrapper may run before this file's constructors): the entries
// stay reachable at exit (LeakSanitizer).
std::vector<Entry*>& retired() {
  static auto* entries = new std::vector<Entry*>;
  return *entries;
}
std::atomic<int> g_count{0};
std::vector<Pending> g_pending;
std::atomic<int> g_pending_count{0};
std::vector<Prefixed> g_prefixed;
std::atomic<int> g_prefixed_count{0};

Entry* find_locked(int epfd, int fd) {
  for (Entry* e : g_entries) {
    if (e->epfd == epfd && e->fd == fd) return e;
  }
  return nullptr;
}

// Whether e is still registered (another thread may have deleted it; e is not dereferenced).
bool alive_locked(const Entry* e) {
  for (Entry* x : g_entries) {
    if (x == e) return true;
  }
  return false;
}

void retire_locked(Entry* e) {
  try {
    retired().push_back(e);
  } catch (const std::bad_alloc&) {
    // No memory to keep it: leaked rather than freed, so that its address stays ours.
  }
}

void erase_locked(Entry* e) {
  for (size_t i = 0; i < g_entries.size(); ++i) {
    if (g_entries[i] == e) {
      g_entries[i] = g_entries.back();
      g_entries.pop_back();
      break;
    }
  }
  g_count.fetch_sub(1, std::memory_order_release);
  retire_locked(e);
}

// A registration's entry, from the retired ones when there are (their addresses stay ours).
Entry* new_entry_locked(const Entry& value) {
  if (retired().empty()) return new (std::nothrow) Entry(value);
  Entry* e = retired().back();
  retired().pop_back();
  *e = value;
  return e;
}

// Whether an event's data is the address of one of our entries, registered or retired (in any set).
bool ours_locked(const void* data) {
  for (const Entry* e : g_entries) {
    if (e == data) return true;
  }
  for (const Entry* e : retired()) {
    if (e == data) return true;
  }
  return false;
}

int fail(int error) {
  errno = error;
  return -1;
}

// What the readiness fd is registered with: it only says "look again"; edge-triggering is kept so
// that an edge-triggered application is woken per change, not continuously.
epoll_event proxy_event(Entry* e) {
  epoll_event ev{};
  ev.events = EPOLLIN | (e->events & EPOLLET);
  ev.data.ptr = e;
  return ev;
}

// The application's events for e now, or 0. *moved: e's stream has gone back to TCP (the entry is
// to leave the readiness fd for the socket).
uint32_t ready_events(const Entry& e, bool* moved = nullptr) {
  StreamRef stream = current_stream(e.fd);
  if (stream == nullptr) return 0;
  // EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLERR and EPOLLHUP have poll's values.
  auto wanted = static_cast<short>(e.events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI));
  bool gone = false;
  auto events = static_cast<uint16_t>(stream_poll_events(stream, wanted, &gone));
  if (moved != nullptr) *moved = gone;
  return gone ? 0 : events;
}

// After (re)registration: arm the stream so its fd fires on the next change, and if it is ready
// already, make it fire now: epoll reports a descriptor that is ready when it is added.
void prime(const Entry& e) {
  StreamRef stream = current_stream(e.fd);
  if (stream != nullptr && ready_events(e) != 0) stream->wake_pollers();
}

// A level-triggered entry was just reported ready: keep its readiness fd readable until the stream is
// looked at again. The application's own epoll_wait would report it anyway, but a set that is itself
// watched (epoll inside epoll, or poll on the epoll fd) is readable only while a registered fd is: the
// kernel must see the still-ready stream too, as it sees a socket with unread bytes.
void keep_signalled(const Entry& e) {
  if (e.events & (EPOLLET | EPOLLONESHOT)) return;
  if (StreamRef stream = current_stream(e.fd)) stream->wake_pollers();
}

void erase_pending_locked(size_t i) {
  g_pending[i] = g_pending.back();
  g_pending.pop_back();
  g_pending_count.fetch_sub(1, std::memory_order_release);
}

void erase_prefixed_locked(size_t i) {
  g_prefixed[i] = g_prefixed.back();
  g_prefixed.pop_back();
  g_prefixed_count.fetch_sub(1, std::memory_order_release);
}

void note_prefixed_locked(int epfd, int fd, const epoll_event& event) {
  if (!(event.events & EPOLLIN)) return;
  g_prefixed.push_back(Prefixed{epfd, fd, event});
  g_prefixed_count.fetch_add(1, std::memory_order_release);
}

// Every registration of `socket` leaves its readiness fd for the socket (epoll_move_back).
void move_back_locked(TrackedSocket* socket) {
  for (size_t i = g_entries.size(); i-- > 0;) {
    Entry* e = g_entries[i];
    if (fd_table().find(e->fd) != socket) continue;
    real().epoll_ctl(e->epfd, EPOLL_CTL_DEL, e->readiness_fd, nullptr);
    // A one-shot registration that fired stays disarmed until the application's EPOLL_CTL_MOD.
    epoll_event ev{e->disabled ? static_cast<uint32_t>(EPOLLONESHOT) : e->events, e->data};
    if (real().epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->fd, &ev) == 0 && !e->disabled && socket->prefix.present()) {
      note_prefixed_locked(e->epfd, e->fd, ev);
    }
    erase_locked(e);
  }
}

// e's stream went back to TCP, as epoll_wait found: the socket is the kernel's again (complete_move_back
// without taking our lock twice). False when another thread of this process is moving it (a fork):
// that thread sets the prefix, then moves the registrations itself, which needs our lock.
bool move_back_now_locked(Entry* e) {
  SocketHold socket = SocketHold::of(e->fd);
  if (!socket) return true;
  if (socket->moving_back.load(std::memory_order_acquire)) return false;
  settle_back_on_tcp(socket.get(), e->fd);
  move_back_locked(socket.get());
  return true;
}

// Whether descriptor fd's connection is being moved back by another thread.
bool moving_back(int fd) {
  SocketHold socket = SocketHold::of(fd);
  return socket && socket->moving_back.load(std::memory_order_acquire);
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

int epoll_ctl_upgraded(int epfd, int op, int fd, epoll_event* event) noexcept {
  StreamRef stream = current_stream(fd);
  if (stream == nullptr) return fail(EBADF);
  std::lock_guard lock(g_mutex);
  Entry* e = find_locked(epfd, fd);
  switch (op) {
    case EPOLL_CTL_ADD: {
      if (e != nullptr) return fail(EEXIST);
      if (event == nullptr) return fail(EFAULT);
      e = new_entry_locked(Entry{epfd, fd, stream->readiness_fd(), event->events, event->data, false});
      if (e == nullptr) return fail(ENOMEM);
      epoll_event ev = proxy_event(e);
      if (real().epoll_ctl(epfd, EPOLL_CTL_ADD, e->readiness_fd, &ev) != 0) {
        int error = errno;
        retire_locked(e);
        return fail(error);
      }
      g_entries.push_back(e);
      g_count.fetch_add(1, std::memory_order_release);
      prime(*e);
      return 0;
    }
    case EPOLL_CTL_MOD: {
      if (e == nullptr) return fail(ENOENT);
      if (event == nullptr) return fail(EFAULT);
      e->events = event->events;
      e->data = event->data;
      e->disabled = false;
      epoll_event ev = proxy_event(e);
      int rc = real().epoll_ctl(epfd, EPOLL_CTL_MOD, e->readiness_fd, &ev);
      if (rc == 0) prime(*e);
      return rc;
    }
    case EPOLL_CTL_DEL: {
      if (e == nullptr) return fail(ENOENT);
      int rc = real().epoll_ctl(epfd, EPOLL_CTL_DEL, e->readiness_fd, nullptr);
      erase_locked(e);
      return rc;
    }
    default:
      return fail(EINVAL);
  }
}

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
  auto deadline = timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(timeout_ms);
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
    int wait_ms = n > 0 ? 0
                  : deadline == Clock::time_point::max()
                      ? -1
                      : static_cast<int>(std::max<int64_t>(
                            0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
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
    if (out > 0 || (wait_ms == 0 && awaited_fd < 0) || (awaited_fd >= 0 && Clock::now() >= deadline)) {
      for (Entry* e : reported) keep_signalled(*e);
      *result = out;
      errno = saved_errno;  // success leaves errno alone, as the kernel's epoll_wait does
      return true;
    }
    // Only readiness fds fired, with nothing the application asked for: wait again.
  }
}

void epoll_note_registration(int epfd, int op, int fd, const epoll_event* event) noexcept {
  SocketHold socket = SocketHold::of(fd);
  if (!socket) return;
  if (socket->prefix.present() || g_prefixed_count.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(g_mutex);
    for (size_t i = g_prefixed.size(); i-- > 0;) {
      if (g_prefixed[i].epfd == epfd && g_prefixed[i].fd == fd) erase_prefixed_locked(i);
    }
    if (op != EPOLL_CTL_DEL && event != nullptr && socket->prefix.present()) note_prefixed_locked(epfd, fd, *event);
  }
  if (!socket->upgrade_pending.load(std::memory_order_acquire) && socket->active_session() == nullptr) return;
  std::lock_guard lock(g_mutex);
  for (size_t i = 0; i < g_pending.size(); ++i) {
    if (g_pending[i].epfd != epfd || g_pending[i].fd != fd) continue;
    if (op == EPOLL_CTL_DEL) {
      erase_pending_locked(i);
    } else if (op == EPOLL_CTL_MOD && event != nullptr) {
      g_pending[i].event = *event;
    }
    return;
  }
  if (op == EPOLL_CTL_ADD && event != nullptr) {
    g_pending.push_back(Pending{epfd, fd, *event});
    g_pending_count.fetch_add(1, std::memory_order_release);
  }
}

void epoll_move_pending(int fd, bool upgraded) noexcept {
  if (g_pending_count.load(std::memory_order_acquire) == 0) return;
  std::vector<Pending> moving;
  {
    std::lock_guard lock(g_mutex);
    for (size_t i = g_pending.size(); i-- > 0;) {
      if (g_pending[i].fd != fd) continue;
      moving.push_back(g_pending[i]);
      erase_pending_locked(i);
    }
  }
  if (!upgraded) return;
  for (Pending& p : moving) {
    // The same registration, now on the stream; a stream that is ready already is reported at once.
    real().epoll_ctl(p.epfd, EPOLL_CTL_DEL, fd, nullptr);
    epoll_ctl_upgraded(p.epfd, EPOLL_CTL_ADD, fd, &p.event);
  }
}

void epoll_move_back(TrackedSocket* socket) noexcept {
  if (g_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(g_mutex);
  move_back_locked(socket);
}

void epoll_forget_fd(int fd) noexcept {
  if (g_prefixed_count.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(g_mutex);
    for (size_t i = g_prefixed.size(); i-- > 0;) {
      if (g_prefixed[i].fd == fd) erase_prefixed_locked(i);
    }
  }
  if (g_pending_count.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(g_mutex);
    for (size_t i = g_pending.size(); i-- > 0;) {
      if (g_pending[i].fd == fd) erase_pending_locked(i);
    }
  }
  if (g_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(g_mutex);
  for (size_t i = g_entries.size(); i-- > 0;) {
    Entry* e = g_entries[i];
    if (e->fd != fd) continue;
    real().epoll_ctl(e->epfd, EPOLL_CTL_DEL, e->readiness_fd, nullptr);
    erase_locked(e);
  }
}

void epoll_hold_for_fork() noexcept { g_mutex.lock(); }
void epoll_release_after_fork() noexcept { g_mutex.unlock(); }

void epoll_forget_set(int epfd) noexcept {
  if (g_prefixed_count.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(g_mutex);
    for (size_t i = g_prefixed.size(); i-- > 0;) {
      if (g_prefixed[i].epfd == epfd) erase_prefixed_locked(i);
    }
  }
  if (g_pending_count.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(g_mutex);
    for (size_t i = g_pending.size(); i-- > 0;) {
      if (g_pending[i].epfd == epfd) erase_pending_locked(i);
    }
  }
  if (g_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(g_mutex);
  for (size_t i = g_entries.size(); i-- > 0;) {
    if (g_entries[i]->epfd == epfd) erase_locked(g_entries[i]);
  }
}

}  // namespace tcp2rdma::preload
