// Level-triggered reports carried to their set's next wait (epoll_entries.h, keep_reported_locked),
// and registrations ready when made (prime).
//
// The kernel keeps a level-triggered descriptor it reported on its ready list and looks at it again
// at the next wait. Pushing such an entry through its record's news list does the same for us, at
// the price of an eventfd write, a wakeup of the next wait with nothing in it and the reads of a
// take: in an event loop that answers one request per wakeup (redis at -c 1), most of what the
// module added per request. A set's own waits can look at the entries again from the module's state
// instead, with no call at all. The push is still needed wherever the kernel's ready list is seen
// by someone else than the set's next wait: another thread asleep on the set (the kernel wakes it),
// and a poller of the set's descriptor (an epoll set inside another, poll or select on it), which must
// find it readable. So a set carries only when this process made it (epoll_create here: a set
// inherited through exec is not known), no poller was ever seen watching it, no other thread of ours
// sleeps in it, and no thread of the process may sleep in the kernel's wait on it alone (EpollWaiter,
// epoll_sets.h: a ready registration added to its set must wake it).
#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <unordered_map>
#include <vector>

#include "readiness/epoll_entries.h"
#include "readiness/epoll_report.h"
#include "readiness/epoll_sets.h"
#include "own_calls.h"
#include "registry/fd_table.h"

namespace tcp2rdma::preload {
namespace epoll_detail {
namespace {

// One bit per descriptor number, read without a lock (poll and select look up every descriptor they
// are given). Zero pages of the bss cost nothing until a bit in them is set.
class FdBits {
 public:
  bool test(int fd) const noexcept {
    if (static_cast<unsigned>(fd) >= static_cast<unsigned>(FdTable::kMaxFd)) return false;
    return (words_[fd / 64].load(std::memory_order_relaxed) >> (fd % 64) & 1) != 0;
  }
  void set(int fd, bool on) noexcept {
    if (static_cast<unsigned>(fd) >= static_cast<unsigned>(FdTable::kMaxFd)) return;
    uint64_t bit = uint64_t{1} << (fd % 64);
    if (on) {
      words_[fd / 64].fetch_or(bit, std::memory_order_relaxed);
    } else {
      words_[fd / 64].fetch_and(~bit, std::memory_order_relaxed);
    }
  }

 private:
  std::atomic<uint64_t> words_[FdTable::kMaxFd / 64] = {};
};

FdBits g_sets_made;  // epoll sets made here, by number
FdBits g_watched;  // of those, the ones a poller was seen watching

// Threads that may be in the kernel's wait on a set without the module's path (EpollWaiter): all of
// them, and by set, in buckets of set numbers (two sets that share a bucket each count the other's
// waiters: the safe side). A server's accepting thread waits alone on its listener's set, and its
// workers' sets carry all the same.
std::atomic<int> g_lone_waiters{0};
constexpr int kLoneBuckets = 256;
std::atomic<int> g_lone_by_set[kLoneBuckets];
std::atomic<int>& lone_bucket(int epfd) { return g_lone_by_set[static_cast<unsigned>(epfd) % kLoneBuckets]; }
// A waiter counts itself before it looks at the registrations, a registering thread looks at the
// count after adding its own: one of the two sees the other. Both sides change the count (the
// reader adds 0): one of the two read-modify-writes comes first, and the later one sees it and what
// its thread did before.
bool lone_waiter_on(int epfd) { return lone_bucket(epfd).fetch_add(0, std::memory_order_seq_cst) > 0; }

struct SetWaits {
  std::vector<Entry*> carried;  // reported level-triggered entries, looked at again by the next wait
  int sleepers = 0;             // threads of ours inside the kernel's wait on the set
};

// By set. Nodes are never erased (a sleeper holds its set's across the wait, while another thread
// may close the set): a closed set's is emptied, and reused with its number.
std::unordered_map<int, SetWaits>& waits() {
  static auto* all = new std::unordered_map<int, SetWaits>;
  return *all;
}

SetWaits* waits_of_locked(int epfd) {
  try {
    return &waits()[epfd];
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

}  // namespace

void report_carried_locked(int epfd, EpollReport& report) {
  auto it = waits().find(epfd);
  if (it == waits().end() || it->second.carried.empty()) return;
  static thread_local std::vector<Entry*> taken;
  taken.swap(it->second.carried);
  it->second.carried.clear();
  for (Entry* e : taken) e->carried = false;
  for (Entry* e : taken) {
    // One that went, or was reused in another set, is not the kernel's to report either.
    if (!alive_locked(e) || e->epfd != epfd || e->disabled) continue;
    report.report_carried(e);
  }
  taken.clear();
}

// The set's carried list, when the set may carry (see the top of the file); else null.
SetWaits* carrying_locked(int epfd) {
  if (!g_sets_made.test(epfd) || g_watched.test(epfd) || lone_waiter_on(epfd)) return nullptr;
  SetWaits* w = waits_of_locked(epfd);
  return w != nullptr && w->sleepers == 0 ? w : nullptr;
}

void look_again_locked(Entry& e, SetWaits* w) {
  if (e.carried) return;  // listed already (an event loop that modifies a ready registration twice)
  if (w != nullptr) {
    try {
      w->carried.push_back(&e);
      e.carried = true;
      return;
    } catch (const std::bad_alloc&) {
    }
  }
  e.record->watch.push(&e);
}

void keep_reported_locked(int epfd, const std::vector<Entry*>& reported) {
  SetWaits* w = carrying_locked(epfd);
  for (Entry* e : reported) {
    if (!(e->events & (EPOLLET | EPOLLONESHOT))) look_again_locked(*e, w);
  }
}

void prime(Entry& e) {
  if (ready_events(e) != 0) look_again_locked(e, carrying_locked(e.epfd));
}

bool may_sleep_unarmed(int epfd) {
  return !g_sets_made.test(epfd) || g_watched.test(epfd) || lone_waiter_on(epfd);
}

bool has_sleepers_locked(int epfd) {
  auto it = waits().find(epfd);
  return it != waits().end() && it->second.sleepers > 0;
}

bool takes_lazily() { return g_lone_waiters.fetch_add(0, std::memory_order_seq_cst) == 0; }

void note_sleeper_locked(int epfd, int change) {
  if (SetWaits* w = waits_of_locked(epfd)) w->sleepers += change;
}

// Its carried entries are pushed through their records: someone now sees the set from outside.
void push_carried_locked(int epfd) {
  auto it = waits().find(epfd);
  if (it == waits().end()) return;
  for (Entry* e : it->second.carried) {
    e->carried = false;
    if (alive_locked(e) && e->epfd == epfd) e->record->watch.push(e);
  }
  it->second.carried.clear();
}

void forget_carried_locked(int epfd) {
  auto it = waits().find(epfd);
  if (it == waits().end()) return;
  for (Entry* e : it->second.carried) e->carried = false;
  it->second.carried.clear();
}

}  // namespace epoll_detail

using namespace epoll_detail;

EpollWaiter::EpollWaiter(int epfd) noexcept : epfd_(epfd) {
  if (transport::OwnCalls::active()) return;
  g_lone_waiters.fetch_add(1, std::memory_order_seq_cst);
  lone_bucket(epfd_).fetch_add(1, std::memory_order_seq_cst);
  counted_ = true;
}

void EpollWaiter::leave() noexcept {
  if (counted_) {
    lone_bucket(epfd_).fetch_sub(1, std::memory_order_release);
    g_lone_waiters.fetch_sub(1, std::memory_order_release);
  }
  counted_ = false;
}

void epoll_note_set_made(int epfd) noexcept {
  // The module's own sets are none of the application's (and it may hold our lock: own_calls.h).
  if (epfd < 0 || transport::OwnCalls::active()) return;
  g_watched.set(epfd, false);
  g_sets_made.set(epfd, true);
  // A set closed without our close() (close_range, dup2 over it) left its list: not this set's.
  std::lock_guard lock(g_mutex);
  forget_carried_locked(epfd);
}

void epoll_note_set_gone(int fd) noexcept {
  if (!g_sets_made.test(fd)) return;
  g_sets_made.set(fd, false);
  g_watched.set(fd, false);
}

void epoll_note_watched(int fd) noexcept {
  if (!g_sets_made.test(fd) || g_watched.test(fd) || transport::OwnCalls::active()) return;
  std::lock_guard lock(g_mutex);
  g_watched.set(fd, true);
  push_carried_locked(fd);
  // Its poller sleeps on the set without arming the links' queues itself.
  make_links_eager_locked(fd);
}

}  // namespace tcp2rdma::preload
