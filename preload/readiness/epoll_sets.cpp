#include "readiness/epoll_sets.h"

#include <algorithm>
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
#include "registry/upgrade_session.h"
#include "route/route.h"

namespace tcp2rdma::preload {
namespace epoll_detail {

std::mutex g_mutex;
std::vector<Entry*> g_entries;
// Made on first use (a wrapper may run before this file's constructors) and never destroyed: the
// entries stay reachable at exit (LeakSanitizer).
std::vector<Entry*>& retired() {
  static auto* entries = new std::vector<Entry*>;
  return *entries;
}
std::atomic<int> g_count{0};
std::vector<Pending> g_pending;
std::atomic<int> g_pending_count{0};
std::vector<Prefixed> g_prefixed;
std::atomic<int> g_prefixed_count{0};

std::unordered_map<uint64_t, Entry*> g_by_key;
std::unordered_set<const void*> g_made;
std::unordered_multimap<int, Entry*> g_by_fd;
std::unordered_multimap<const void*, Entry*> g_by_stream;

namespace {
template <typename Map, typename Key>
void erase_pair(Map& map, const Key& key, const Entry* e) {
  for (auto [it, end] = map.equal_range(key); it != end; ++it) {
    if (it->second == e) {
      map.erase(it);
      return;
    }
  }
}
}  // namespace

Entry* find_locked(int epfd, int fd) {
  auto it = g_by_key.find(entry_key(epfd, fd));
  return it == g_by_key.end() ? nullptr : it->second;
}

// Entries are never freed (retired ones are kept for reuse), so any address we made may be read.
Entry* live_locked(const void* data) {
  if (g_made.count(data) == 0) return nullptr;
  auto* e = static_cast<Entry*>(const_cast<void*>(data));
  return find_locked(e->epfd, e->fd) == e ? e : nullptr;
}

// Whether e is still registered (another thread may have deleted or reused it: then it is that one).
bool alive_locked(const Entry* e) { return live_locked(e) != nullptr; }

void retire_locked(Entry* e) {
  try {
    retired().push_back(e);
  } catch (const std::bad_alloc&) {
    // No memory to keep it: leaked rather than freed, so that its address stays ours.
  }
}

void erase_locked(Entry* e) {
  // Its stream tells the record no more (the socket's own stream: one moving back to TCP is no longer
  // the route of its calls, and still pushes). A stream no longer the descriptor's at all (closed)
  // keeps telling a tag that its record then finds retired or reused, and ignores.
  SocketHold socket = SocketHold::of(e->fd);
  transport::RdmaStream* stream = socket ? socket->own_stream() : nullptr;
  if (stream != nullptr && static_cast<const void*>(stream) == e->stream) transport::LinkWatch::unsubscribe(*stream, e);
  leave_record_locked(e->record);
  g_by_key.erase(entry_key(e->epfd, e->fd));
  erase_pair(g_by_fd, e->fd, e);
  erase_pair(g_by_stream, e->stream, e);
  if (e->slot < g_entries.size() && g_entries[e->slot] == e) {
    g_entries[e->slot] = g_entries.back();
    g_entries[e->slot]->slot = e->slot;
    g_entries.pop_back();
  }
  g_count.fetch_sub(1, std::memory_order_release);
  retire_locked(e);
}

// A registration's entry, from the retired ones when there are (their addresses stay ours).
Entry* new_entry_locked(const Entry& value) {
  if (retired().empty()) {
    Entry* e = new (std::nothrow) Entry(value);
    if (e != nullptr) g_made.insert(e);
    return e;
  }
  Entry* e = retired().back();
  retired().pop_back();
  *e = value;
  return e;
}

int fail(int error) {
  errno = error;
  return -1;
}

// The application's events for e now, or 0. *moved: e's stream has gone back to TCP (the entry is
// to leave its record for the socket).
uint32_t ready_events(const Entry& e, bool* moved) {
  StreamRef stream = current_stream(e.fd);
  if (stream == nullptr) return 0;
  // EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLERR and EPOLLHUP have poll's values.
  auto wanted = static_cast<short>(e.events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI));
  // The record's watch takes the link's events when its set fires (expand_record): the look leaves them.
  bool gone = false, watched = e.record->watch.takes_events_of(*stream);
  auto events = static_cast<uint16_t>(stream_poll_events(stream, wanted, &gone, watched));
  if (moved != nullptr) *moved = gone;
  return gone ? 0 : events;
}

void erase_pending_locked(size_t i) {
  g_pending[i] = g_pending.back();
  g_pending.pop_back();
  g_pending_count.fetch_sub(1, std::memory_order_release);
}

void note_pending_locked(const Pending& p) {
  g_pending.push_back(p);
  g_pending_count.fetch_add(1, std::memory_order_release);
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

// Every registration of `socket` leaves its stream's record for the socket (epoll_move_back).
void move_back_locked(TrackedSocket* socket) {
  static thread_local std::vector<Entry*> moving;
  moving.clear();
  if (const void* stream = socket->own_stream(); stream != nullptr) {
    for (auto [it, end] = g_by_stream.equal_range(stream); it != end; ++it) moving.push_back(it->second);
  } else {
    moving = g_entries;  // a forked child's inherited socket: its stream is not this process's to name
  }
  for (Entry* e : moving) {
    if (fd_table().find(e->fd) != socket) continue;
    // A one-shot registration that fired stays disarmed until the application's EPOLL_CTL_MOD.
    epoll_event ev{e->disabled ? static_cast<uint32_t>(EPOLLONESHOT) : e->events, e->data};
    bool added = real().epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->fd, &ev) == 0;
    if (added && !e->disabled && socket->prefix.present()) note_prefixed_locked(e->epfd, e->fd, ev);
    // Kept for the connection's return to RDMA (return_plan.h), which moves them onto its new stream.
    if (added && socket->returns.armed()) note_pending_locked(Pending{e->epfd, e->fd, ev});
    erase_locked(e);
  }
}

// e's stream went back to TCP, as epoll_wait found: the socket is the kernel's again (complete_move_back
// without taking our lock twice). False when another thread of this process is moving it (a fork):
// that thread sets the prefix, then moves the registrations itself, which needs our lock.
bool move_back_now_locked(Entry* e) {
  SocketHold socket = SocketHold::of(e->fd);
  if (!socket) return true;
  if (socket->being_moved()) return false;
  mark_connection_back_on_tcp(socket.get(), e->fd);
  move_back_locked(socket.get());
  return true;
}

}  // namespace epoll_detail

using namespace epoll_detail;

int epoll_ctl_upgraded(int epfd, int op, int fd, epoll_event* event) noexcept {
  StreamRef stream = current_stream(fd);
  if (stream == nullptr) return fail(EBADF);
  std::lock_guard lock(g_mutex);
  Entry* e = find_locked(epfd, fd);
  switch (op) {
    case EPOLL_CTL_ADD: {
      if (e != nullptr) return fail(EEXIST);
      if (event == nullptr) return fail(EFAULT);
      // The link's record in this set: made and registered with the first of its channels here (a
      // bad epfd fails there, with the kernel's error; a descriptor not to be had, with ENOMEM).
      Record* record = join_record_locked(epfd, *stream);
      if (record == nullptr) return -1;
      e = new_entry_locked(Entry{epfd, fd, record, static_cast<transport::RdmaStream*>(stream), event->events,
                                 event->data, false, g_entries.size()});
      if (e == nullptr || !record->watch.subscribe(*stream, e)) {
        if (e != nullptr) retire_locked(e);
        leave_record_locked(record);
        return fail(ENOMEM);
      }
      g_entries.push_back(e);
      g_by_key[entry_key(epfd, fd)] = e;
      g_by_fd.emplace(fd, e);
      g_by_stream.emplace(e->stream, e);
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
      prime(*e);
      return 0;
    }
    case EPOLL_CTL_DEL: {
      if (e == nullptr) return fail(ENOENT);
      erase_locked(e);
      return 0;
    }
    default:
      return fail(EINVAL);
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
  UpgradeSession* session = socket->active_session();
  // Remembered while an upgrade may move them: one pending or under way, or a return planned.
  if (!socket->upgrade_pending() && session == nullptr && !socket->returns.armed()) return;
  if (session != nullptr) session->note_used();
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
    note_pending_locked(Pending{epfd, fd, *event});
  }
}

void epoll_move_pending(int fd, bool upgraded) noexcept {
  if (g_pending_count.load(std::memory_order_acquire) == 0) return;
  // A connection that stays on TCP for now but may return to RDMA keeps them for its next attempt.
  SocketHold staying = upgraded ? SocketHold() : SocketHold::of(fd);
  if (staying && staying->returns.armed()) return;
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

bool epoll_move_back(TrackedSocket* socket, int fd, bool by_mover) noexcept {
  // Always under the lock, registrations or not: one being added now must be moved too, and a waiter
  // (epoll_wait, under this lock) sees the path and the registrations change together.
  std::lock_guard lock(g_mutex);
  if (!mark_connection_back_on_tcp(socket, fd, by_mover)) return false;
  move_back_locked(socket);
  return true;
}

bool epoll_watches_input(const void* stream) noexcept {
  if (g_count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(g_mutex);
  auto [it, end] = g_by_stream.equal_range(stream);
  return std::any_of(it, end, [](const auto& by_stream) { return (by_stream.second->events & EPOLLIN) != 0; });
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
  std::vector<Entry*> closing;
  for (auto [it, end] = g_by_fd.equal_range(fd); it != end; ++it) closing.push_back(it->second);
  for (Entry* e : closing) erase_locked(e);
}

void epoll_hold_for_fork() noexcept { g_mutex.lock(); drop_idle_records_locked(); }
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
  epoll_note_set_gone(epfd);
  if (g_count.load(std::memory_order_acquire) == 0 && g_idle_records.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(g_mutex);
  forget_carried_locked(epfd);
  for (size_t i = g_entries.size(); i-- > 0;) {
    if (g_entries[i]->epfd == epfd) erase_locked(g_entries[i]);
  }
  forget_records_locked(epfd);
}

}  // namespace tcp2rdma::preload
