#include "upgrade/request_watch.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "registry/per_process.h"
#include "registry/upgrade_session.h"
#include "tuple_hash.h"
#include "util/quiet_thread.h"

namespace tcp2rdma::preload {
namespace {

// The sleep between two rounds while something is seen only by looking: a listener whose descriptor
// is not readable for the opens on its links (StreamListener::wakes_for_opens), a request held until
// its connection is used (answerable), no bell for new waits. Otherwise a request wakes the engine
// when it comes (a listener's descriptor covers its rdma_cm channel and its links:
// StreamListener::fd()), a new wait rings the engine's bell, and the engine sleeps until its sweep:
// a wait that lasts (a client without the module never asks; the rule's upgrade_timeout) costs ten
// looks a second, not a hundred.
constexpr int kLookMs = 10;
// Every wait is looked at this often (its connection settled, its time up); in between only those
// whose request a listener took, and the new ones. An open on a link that an event loop watches,
// which comes while the loop is busy elsewhere, is found by the sweep's collect at the latest.
constexpr auto kSweep = std::chrono::milliseconds(100);

// What the engine's thread holds: the waits, found by their tuple, and the listeners they wait at.
// A round costs the news it takes, not the number of waits: with thousands waiting, a look at each
// every 10 ms (a lock, a search of the listener's requests, a random nonce drawn: a system call)
// took a guest's only CPU from the connections it was upgrading.
class Waits {
 public:
  bool empty() const { return all_.empty(); }
  size_t size() const { return all_.size(); }
  RequestWaiter& operator[](size_t i) { return all_[i]; }
  // Room for `more` first, so that no waiter is half moved when memory is short.
  void reserve(size_t more) {
    all_.reserve(all_.size() + more);
    by_tuple_.reserve(all_.size() + more);
    fds_.reserve(all_.size() + more);
  }
  size_t add(RequestWaiter&& x) {
    size_t i = all_.size();
    // The newest wait for a tuple is the one found: an older one is a closed connection's whose wait
    // has not been swept yet (a tuple reused within 100 ms), which the sweep ends.
    by_tuple_.insert_or_assign(x.wait->tuple(), i);
    TrackedSocket* listener = x.wait->listener();
    auto it = std::find_if(listeners_.begin(), listeners_.end(), [&](const auto& l) { return l.first == listener; });
    if (it == listeners_.end()) {
      listeners_.emplace_back(listener, 1);
    } else {
      ++it->second;
    }
    all_.push_back(std::move(x));
    return i;
  }
  // The index of the wait for `tuple`, or size().
  size_t find(const transport::TcpTuple& tuple) const {
    auto it = by_tuple_.find(tuple);
    return it == by_tuple_.end() ? all_.size() : it->second;
  }
  // Wait i's request is held until its process uses the connection (held_for_use), or no longer;
  // held() counts them, so that a round looks for them only while there are any.
  void set_held(size_t i, bool held) {
    if (all_[i].held_for_use == held) return;
    all_[i].held_for_use = held;
    held ? ++held_ : --held_;
  }
  size_t held() const { return held_; }
  // Takes wait i out (the last one takes its place).
  RequestWaiter take(size_t i) {
    set_held(i, false);
    RequestWaiter x = std::move(all_[i]);
    if (auto it = by_tuple_.find(x.wait->tuple()); it != by_tuple_.end() && it->second == i) by_tuple_.erase(it);
    auto l = std::find_if(listeners_.begin(), listeners_.end(), [&](const auto& e) { return e.first == x.wait->listener(); });
    if (--l->second == 0) listeners_.erase(l);
    if (i + 1 != all_.size()) {
      all_[i] = std::move(all_.back());
      if (auto it = by_tuple_.find(all_[i].wait->tuple()); it != by_tuple_.end() && it->second == all_.size() - 1) {
        it->second = i;
      }
    }
    all_.pop_back();
    return x;
  }
  const std::vector<std::pair<TrackedSocket*, size_t>>& listeners() const { return listeners_; }
  std::vector<pollfd>& fds() { return fds_; }

 private:
  std::vector<RequestWaiter> all_;
  size_t held_ = 0;
  std::unordered_map<transport::TcpTuple, size_t, transport::TupleHash, transport::TupleEqual> by_tuple_;
  std::vector<std::pair<TrackedSocket*, size_t>> listeners_;  // and how many waits each has
  std::vector<pollfd> fds_;
};

struct Watch {
  explicit Watch(unsigned made_in) : generation(made_in) {}
  const unsigned generation;  // fork_generation() of the process it serves
  std::mutex mu;
  std::condition_variable arrived;
  std::vector<RequestWaiter> incoming;  // handed over, not yet taken by the thread
  bool running = false;
  // An eventfd that watch_request writes when it hands a wait over while the thread sleeps until
  // its sweep (sleeping); -1 when none could be made: the thread looks every kLookMs then.
  int bell = -1;
  bool sleeping = false;
  // The thread's own, kept here rather than on its stack: in a forked child, where the thread is not,
  // LeakSanitizer reaches them through g_watch instead of reporting them lost.
  Waits waits;
  std::vector<size_t> due;
};

// Takes what arrived at every listener once: the indices of the waits whose request came go to
// *due, with all of them when a listener could not say which (or has no RDMA listener any more).
// *look_soon: a listener's descriptor is not readable for every open on its links.
void collect(Waits& waits, std::vector<size_t>* due, bool* sweep, bool* look_soon) {
  std::vector<transport::TcpTuple> admitted;
  waits.fds().clear();
  for (const auto& [listener, count] : waits.listeners()) {
    int fd = -1;
    bool whole = true;
    ListenerWake wake;
    if (collect_arrivals(listener, &fd, &admitted, &whole, &wake) != transport::Status::kOk || !whole) *sweep = true;
    if (fd >= 0) waits.fds().push_back(pollfd{fd, POLLIN, 0});
    if (!wake.every_open) *look_soon = true;
  }
  for (const transport::TcpTuple& t : admitted) {
    if (size_t i = waits.find(t); i < waits.size()) due->push_back(i);
  }
}

// How long a connection no call of this process has used is kept from its request, outside a pre-fork
// server: an accept-then-fork server forks within moments of accept(), and one that neither uses nor
// forks a connection for longer gets its answer anyway (a client in before-return mode waits for it).
constexpr auto kUnusedGrace = std::chrono::milliseconds(200);

// Whether this process may answer x's request now. The process that accepted a connection may fork it
// away unused (PostgreSQL's postmaster, inetd, socat's fork), and a request answered here could not
// follow it: the request, come or to come, is answered once a call of this process has used the
// connection; in a pre-fork server's process only then (its processes fork their connections away by
// design), elsewhere also once kUnusedGrace has passed.
bool answerable(const RequestWaiter& x, std::chrono::steady_clock::time_point now) {
  return x.session->used() || (!x.wait->in_family() && now - x.wait->began() >= kUnusedGrace);
}

// Looks at wait i: answered, or over (settled, its time up, no listener), it leaves and its `done`
// runs; otherwise it stays. `full`: a sweep's look, which only a settled connection or a time up
// needs to go further than the clock.
void look_at(Waits& waits, size_t i, bool full, std::chrono::steady_clock::time_point now) {
  RequestWaiter& x = waits[i];
  bool over = x.session->phase() == UpgradeSession::Phase::kOver;
  if (full && !over && !x.wait->expired(now)) return;
  if (over && x.session->deferred()) {
    // A fork deferred it: the request, held or to come, is for the process that uses the connection
    // next (process/deferred_upgrade.h): neither answered nor declined here.
    RequestWaiter done = waits.take(i);
    done.done(transport::Status::kWouldBlock, nullptr);
    return;
  }
  if (!over && !answerable(x, now)) {
    waits.set_held(i, true);
    if (!x.wait->expired(now)) return;
    x.wait->give_up();
    RequestWaiter done = waits.take(i);
    done.done(transport::Status::kWouldBlock, nullptr);
    return;
  }
  waits.set_held(i, false);
  std::unique_ptr<transport::RdmaStream> answered;
  transport::Status s = x.wait->look(&answered);  // may move the time up later (a client still asking)
  if (s == transport::Status::kWouldBlock && !over && !x.wait->expired(now)) return;
  if (s == transport::Status::kWouldBlock) x.wait->give_up();
  RequestWaiter done = waits.take(i);
  done.done(s, std::move(answered));
}

// Sleeps on the listeners' descriptors until one has news, or the next look is due: in kLookMs when
// `look_soon` (or without a bell), else at `next_sweep` unless a new wait rings the bell first.
void sleep_until_news(Watch* w, bool look_soon, std::chrono::steady_clock::time_point next_sweep) {
  std::vector<pollfd>& fds = w->waits.fds();
  if (look_soon || w->bell < 0) {
    real().poll(fds.data(), fds.size(), kLookMs);
    return;
  }
  {
    std::lock_guard lock(w->mu);
    if (!w->incoming.empty()) return;  // handed over since the round took them
    w->sleeping = true;
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_sweep - std::chrono::steady_clock::now());
  int ms = static_cast<int>(std::clamp<int64_t>(left.count(), 1, kSweep.count()));
  fds.push_back(pollfd{w->bell, POLLIN, 0});
  real().poll(fds.data(), fds.size(), ms);
  bool rung = fds.back().revents != 0;
  fds.pop_back();
  {
    std::lock_guard lock(w->mu);
    w->sleeping = false;
  }
  eventfd_t rings = 0;
  if (rung) (void)eventfd_read(w->bell, &rings);  // libc's own call: the waits are taken next round
}

// The engine's thread: takes the new waits and what arrived at the listeners, answers the requests
// that came, ends the waits that are over, and sleeps until a listener has news, a new wait comes
// or the next look is due.
void run(Watch* w) {
  Waits& waits = w->waits;
  std::vector<size_t>& due = w->due;
  auto next_sweep = std::chrono::steady_clock::now();
  for (;;) {
    due.clear();
    bool room = true, sweep = false;
    {
      std::unique_lock lock(w->mu);
      if (waits.empty()) w->arrived.wait(lock, [w] { return !w->incoming.empty(); });
      try {
        waits.reserve(w->incoming.size());
        due.reserve(waits.size() + w->incoming.size());
      } catch (const std::bad_alloc&) {
        room = false;
      }
      if (room) {
        for (RequestWaiter& x : w->incoming) due.push_back(waits.add(std::move(x)));
        w->incoming.clear();
      }
    }
    if (!room) {  // the new waits stay handed over; the next round tries again
      real().poll(nullptr, 0, kLookMs);
      continue;
    }
    bool look_soon = false;
    collect(waits, &due, &sweep, &look_soon);
    auto now = std::chrono::steady_clock::now();
    // From the last: a wait that leaves takes the last one's place, which was looked at already (or
    // is not due).
    std::sort(due.begin(), due.end(), std::greater<>());
    due.erase(std::unique(due.begin(), due.end()), due.end());
    for (size_t i : due) look_at(waits, i, false, now);
    // Connections a look left for their process to use, now used (from the last, as above).
    for (size_t i = waits.size(); waits.held() > 0 && i-- > 0;) {
      if (waits[i].held_for_use && answerable(waits[i], now)) look_at(waits, i, false, now);
    }
    if (sweep || now >= next_sweep) {
      for (size_t i = waits.size(); i-- > 0;) look_at(waits, i, !sweep, now);
      next_sweep = now + kSweep;
    }
    if (!waits.empty()) sleep_until_news(w, look_soon || waits.held() > 0, next_sweep);
  }
}

std::atomic<Watch*> g_watch{nullptr};

}  // namespace

bool watch_request(RequestWaiter& waiter) noexcept {
  Watch* w = this_process_instance(g_watch);
  if (w == nullptr) return false;
  std::lock_guard lock(w->mu);
  if (!w->running) {
    if (w->bell < 0) {
      transport::OwnDescriptors window;  // above the application's range (own_descriptors.h)
      w->bell = window.place(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    }
    std::thread thread = start_quiet_thread([w] { run(w); });
    if (!thread.joinable()) return false;
    thread.detach();
    w->running = true;
  }
  try {
    w->incoming.push_back(std::move(waiter));
  } catch (const std::bad_alloc&) {
    return false;
  }
  w->arrived.notify_one();
  if (w->sleeping) {  // until its sweep: the wait is looked at now (its request may be held already)
    w->sleeping = false;
    (void)eventfd_write(w->bell, 1);
  }
  return true;
}

}  // namespace tcp2rdma::preload
