#include "upgrade/request_watch.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "libc/real_calls.h"
#include "registry/per_process.h"
#include "util/quiet_thread.h"

namespace tcp2rdma::preload {
namespace {

// A request that arrives on one of the listener's links (not by rdma_cm) wakes no descriptor the
// engine polls: it is seen at the next look, this long later at most.
constexpr int kLookMs = 10;

struct Watch {
  explicit Watch(unsigned made_in) : generation(made_in) {}
  const unsigned generation;  // fork_generation() of the process it serves
  std::mutex mu;
  std::condition_variable arrived;
  std::vector<RequestWaiter> incoming;  // handed over, not yet taken by the thread
  bool running = false;
};

// The engine's thread: looks at every wait, answers the requests that came, ends the waits that are
// over, and sleeps until a listener has news or the next look is due.
void run(Watch* w) {
  std::vector<RequestWaiter> mine;
  std::vector<pollfd> fds;
  std::vector<TrackedSocket*> collected;
  for (;;) {
    bool room = true;
    {
      std::unique_lock lock(w->mu);
      if (mine.empty()) w->arrived.wait(lock, [w] { return !w->incoming.empty(); });
      try {  // room first, so that no waiter is half moved when memory is short
        mine.reserve(mine.size() + w->incoming.size());
        fds.reserve(mine.capacity());
        collected.reserve(mine.capacity());
      } catch (const std::bad_alloc&) {
        room = false;
      }
      if (room) {
        for (RequestWaiter& x : w->incoming) mine.push_back(std::move(x));
        w->incoming.clear();
      }
    }
    if (!room) {  // the new waits stay handed over; the next round tries again
      real().poll(nullptr, 0, kLookMs);
      continue;
    }
    fds.clear();
    collected.clear();
    for (size_t i = 0; i < mine.size();) {
      RequestWaiter& x = mine[i];
      // A listener's arrivals are taken once per round, by its first wait.
      TrackedSocket* listener = x.wait->listener();
      bool first = std::find(collected.begin(), collected.end(), listener) == collected.end();
      if (first) collected.push_back(listener);
      std::unique_ptr<transport::RdmaStream> answered;
      int fd = -1;
      transport::Status s = x.wait->look(first, &answered, &fd);
      if (s == transport::Status::kWouldBlock && x.session->phase() != UpgradeSession::Phase::kOver && !x.wait->expired()) {
        if (first && fd >= 0) fds.push_back(pollfd{fd, POLLIN, 0});
        ++i;
        continue;
      }
      if (s == transport::Status::kWouldBlock) x.wait->give_up();
      RequestWaiter over = std::move(x);
      if (&x != &mine.back()) x = std::move(mine.back());
      mine.pop_back();
      over.done(s, std::move(answered));
    }
    if (!mine.empty()) real().poll(fds.data(), fds.size(), kLookMs);
  }
}

std::atomic<Watch*> g_watch{nullptr};

}  // namespace

bool watch_request(RequestWaiter& waiter) noexcept {
  Watch* w = this_process_instance(g_watch);
  if (w == nullptr) return false;
  std::lock_guard lock(w->mu);
  if (!w->running) {
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
  return true;
}

}  // namespace tcp2rdma::preload
