// A moment by which a wait must end, or none. Every bounded wait in the project (a stream's flush,
// close and move to TCP, the switch's exchanges, poll and epoll_wait over streams) asks it the same
// two questions: has it passed, and how long may the next sleep last. The answers are rounded up, so
// a wait never wakes before its moment and then reports a timeout early.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

namespace tcp2rdma::transport {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline never() noexcept { return Deadline(Clock::time_point::max()); }
  // A wait longer than the clock can count (an application may ask for years) never ends.
  static Deadline in(Clock::duration d) noexcept {
    auto now = Clock::now();
    return d > Clock::time_point::max() - now ? never() : Deadline(now + d);
  }
  // poll's and epoll_wait's convention: a negative timeout never ends.
  static Deadline in_ms(int64_t ms) noexcept {
    return ms < 0 || ms > kLongestMs ? never() : in(std::chrono::milliseconds(ms));
  }
  // ppoll's and select's: no timeout never ends.
  static Deadline in_timespec(const timespec* t) noexcept {
    if (t == nullptr || t->tv_sec > kLongestMs / 1000) return never();
    return in(std::chrono::seconds(t->tv_sec) + std::chrono::nanoseconds(t->tv_nsec));
  }

  explicit Deadline(Clock::time_point at) noexcept : at_(at) {}

  Clock::time_point at() const noexcept { return at_; }
  bool never_ends() const noexcept { return at_ == Clock::time_point::max(); }
  bool passed() const noexcept { return !never_ends() && Clock::now() >= at_; }

  // How long poll() or epoll_wait() may sleep: -1 when the deadline never ends, 0 once it has
  // passed, else the time left rounded up to whole milliseconds (at most INT_MAX).
  int poll_ms() const noexcept {
    if (never_ends()) return -1;
    auto left = at_ - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
  }

  // The time left for ppoll(), zero once passed; a deadline that never ends has no timespec (pass
  // none to ppoll), so asking for one is the caller's mistake and gets the longest there is.
  timespec left_timespec() const noexcept {
    if (never_ends()) return {std::numeric_limits<time_t>::max(), 0};
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at_ - Clock::now()).count();
    if (ns <= 0) return {0, 0};
    return {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  }

  // The later of two: waiting for both ends at the later one.
  static Deadline later(Deadline a, Deadline b) noexcept { return Deadline(std::max(a.at_, b.at_)); }

 private:
  // Beyond a century a wait is as good as endless, and the sums stay far from overflow.
  static constexpr int64_t kLongestMs = int64_t{100} * 365 * 24 * 3600 * 1000;

  Clock::time_point at_;
};

}  // namespace tcp2rdma::transport
