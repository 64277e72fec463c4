// How long an event loop's wait polls its links before it sleeps (epoll_wait.cpp), per thread: a
// thread waits on one set, for one kind of traffic, at a time.
//
// Fixed (the rule's `busy_poll` a duration): that long every time. Adaptive (`busy_poll: adaptive`):
// a spin pays only when the peer's next message comes within it, and otherwise burns a core the
// device or the peer may need (on emulated Soft-RoCE, the spinning guest's own adapter work). So the
// budget halves after each spin that ran out, down to none, and comes back when a sleep shows that
// messages come fast: one woken with news of ours within a quarter of the rule's time sets the budget
// to twice that wait. Both need nothing but a clock read around a spin or a sleep. A spin so started
// again that shrinks back to none without catching anything makes the next start wait for twice as
// many quick wakeups (1, 3, 7, ... up to 1023; a catch forgets them): the threads of one server that
// share a link wake each other quickly with their news, yet a spin of theirs found the next message
// no sooner than a sleep (memcached's four workers: two sched_yield a request, no request gained).
#pragma once

#include <algorithm>
#include <chrono>

namespace tcp2rdma::preload {

class SpinBudget {
 public:
  using Clock = std::chrono::steady_clock;
  // Spins shorter than this are not worth starting (a poll and a yield take a few microseconds).
  static constexpr int kLeastUs = 8;

  // The spin for this wait: `max_us` is the set's links' rule (0: off), `adaptive` how to use it.
  int next_us(int max_us, bool adaptive) {
    max_us_ = max_us;
    adaptive_ = adaptive;
    if (max_us <= 0) return 0;
    if (!adaptive) return max_us;
    if (us_ < 0) us_ = max_us;  // a thread's first wait starts with the whole budget
    return std::min(us_, max_us);
  }
  // The spin caught news after making `calls` system calls, or ran out. A catch that cost as many
  // calls as a sleep (the arming, the sleep and the event's read: kCallsOfASleep) saved nothing: it
  // counts as running out. Where each poll yields the CPU (a software device: a sched_yield a poll)
  // that is a catch at the fourth poll; a NIC's spin makes no call but a look at the kernel's set every
  // 64 polls, and its reply comes within a few polls.
  void caught(int calls = 0) {
    if (!adaptive_) return;
    if (calls >= kCallsOfASleep) {
      ran_out();
      return;
    }
    us_ = std::min(max_us_, std::max(us_, kLeastUs) * 2);
    misses_ = 0;
    skips_ = 0;
    trial_ = false;
  }
  void ran_out() {
    if (!adaptive_) return;
    us_ = us_ / 2 < kLeastUs ? 0 : us_ / 2;
    if (us_ == 0 && trial_) {
      // Started again by a quick wakeup, and back to none without a catch.
      trial_ = false;
      misses_ = std::min(misses_ + 1, kMostMisses);
      skips_ = (1 << misses_) - 1;
    }
  }
  // A sleep began (after a spin or none), and ended with news of ours (or not).
  void sleeping() { slept_at_ = Clock::now(); }
  void woke(bool with_news) {
    if (!adaptive_ || !with_news || us_ > 0) return;
    auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - slept_at_).count();
    if (waited * 4 > max_us_) return;
    if (skips_ > 0) {
      --skips_;
      return;
    }
    us_ = std::max(static_cast<int>(waited) * 2, kLeastUs);
    trial_ = true;
  }

 private:
  static constexpr int kMostMisses = 10;
  static constexpr int kCallsOfASleep = 3;

  int us_ = -1;
  int misses_ = 0;     // spins started again by a quick wakeup that came to nothing, in a row
  int skips_ = 0;      // quick wakeups still to let pass before the next start
  bool trial_ = false; // the spin now was started again by a quick wakeup
  int max_us_ = 0;
  bool adaptive_ = false;
  Clock::time_point slept_at_{};
};

}  // namespace tcp2rdma::preload
