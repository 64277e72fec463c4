// How long an event loop's wait polls its links before it sleeps (epoll_wait.cpp), per thread: a
// thread waits on one set, for one kind of traffic, at a time.
//
// Fixed (the rule's `busy_poll` a duration): that long every time. Adaptive (`busy_poll: adaptive`):
// a spin pays only when the peer's next message comes within it, and otherwise burns a core the
// device or the peer may need (on emulated Soft-RoCE, the spinning guest's own adapter work). So the
// budget halves after each spin that ran out, down to none, and comes back when a sleep shows that
// messages come fast: one woken with news of ours within a quarter of the rule's time sets the budget
// to twice that wait. Both need nothing but a clock read around a spin or a sleep.
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
  // The spin caught news after `elapsed`, or ran out.
  void caught() {
    if (adaptive_) us_ = std::min(max_us_, std::max(us_, kLeastUs) * 2);
  }
  void ran_out() {
    if (adaptive_) us_ = us_ / 2 < kLeastUs ? 0 : us_ / 2;
  }
  // A sleep began (after a spin or none), and ended with news of ours (or not).
  void sleeping() { slept_at_ = Clock::now(); }
  void woke(bool with_news) {
    if (!adaptive_ || !with_news || us_ > 0) return;
    auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - slept_at_).count();
    if (waited * 4 <= max_us_) us_ = std::max(static_cast<int>(waited) * 2, kLeastUs);
  }

 private:
  int us_ = -1;
  int max_us_ = 0;
  bool adaptive_ = false;
  Clock::time_point slept_at_{};
};

}  // namespace tcp2rdma::preload
