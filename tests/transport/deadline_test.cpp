// The one deadline every bounded wait uses: its poll timeouts never wake a wait before its moment,
// never overflow, and follow poll's and ppoll's conventions for "for ever".
#include "deadline.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <climits>

namespace tcp2rdma::transport {
namespace {

using std::chrono::milliseconds;

TEST(Deadline, NeverEndsIsMinusOneForPollAndNeverPasses) {
  EXPECT_EQ(Deadline::never().poll_ms(), -1);
  EXPECT_FALSE(Deadline::never().passed());
  EXPECT_TRUE(Deadline::in_ms(-1).never_ends());
  EXPECT_TRUE(Deadline::in_timespec(nullptr).never_ends());
}

TEST(Deadline, ZeroHasPassedAtOnce) {
  Deadline now = Deadline::in_ms(0);
  EXPECT_TRUE(now.passed());
  EXPECT_EQ(now.poll_ms(), 0);
  timespec left = now.left_timespec();
  EXPECT_EQ(left.tv_sec, 0);
  EXPECT_EQ(left.tv_nsec, 0);
}

TEST(Deadline, PartOfAMillisecondLeftIsAWholeOne) {
  // Truncating would make epoll_wait sleep 0 ms and report a timeout before its moment.
  Deadline soon = Deadline::in(std::chrono::microseconds(900));
  int ms = soon.poll_ms();
  EXPECT_TRUE(ms == 1 || soon.passed()) << ms;
  // Never less than what is left when asked (measured after, which leaves less still).
  Deadline later = Deadline::in(milliseconds(2500) + std::chrono::microseconds(500));
  int later_ms = later.poll_ms();
  EXPECT_GE(milliseconds(later_ms), later.at() - Deadline::Clock::now());
  EXPECT_LE(later_ms, 2501);
}

TEST(Deadline, AWaitOfItsPollTimeoutEndsAtOrAfterTheDeadline) {
  Deadline d = Deadline::in(milliseconds(30));
  while (!d.passed()) ::poll(nullptr, 0, d.poll_ms());
  EXPECT_GE(Deadline::Clock::now(), d.at());
  EXPECT_EQ(d.poll_ms(), 0);
}

TEST(Deadline, AnEndlessRequestDoesNotOverflow) {
  EXPECT_TRUE(Deadline::in_ms(INT64_MAX).never_ends());
  timespec years{static_cast<time_t>(LONG_MAX), 0};
  EXPECT_TRUE(Deadline::in_timespec(&years).never_ends());
  EXPECT_TRUE(Deadline::in(Deadline::Clock::duration::max()).never_ends());
  // Long but countable: a poll timeout no larger than an int can say.
  Deadline month = Deadline::in_ms(int64_t{31} * 24 * 3600 * 1000);
  EXPECT_FALSE(month.never_ends());
  EXPECT_EQ(month.poll_ms(), INT_MAX);
}

TEST(Deadline, TheLaterOfTwo) {
  Deadline a = Deadline::in(milliseconds(10));
  Deadline b = Deadline::in(milliseconds(5000));
  EXPECT_EQ(Deadline::later(a, b).at(), b.at());
  EXPECT_EQ(Deadline::later(b, a).at(), b.at());
  EXPECT_TRUE(Deadline::later(a, Deadline::never()).never_ends());
}

TEST(Deadline, ATimespecCountsItsNanoseconds) {
  timespec t{1, 500000000};
  Deadline d = Deadline::in_timespec(&t);
  timespec left = d.left_timespec();
  EXPECT_EQ(left.tv_sec, 1);
  EXPECT_GT(left.tv_nsec, 400000000);
  EXPECT_LE(d.poll_ms(), 1500);
  EXPECT_GT(d.poll_ms(), 1400);
}

}  // namespace
}  // namespace tcp2rdma::transport
