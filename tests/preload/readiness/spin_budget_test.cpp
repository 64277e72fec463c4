// The event loop's spin budget (preload/readiness/spin_budget.h): fixed, off, and how the adaptive one
// shrinks while spins find nothing and comes back when messages come fast.
#include "readiness/spin_budget.h"

#include <gtest/gtest.h>

#include <thread>

namespace tcp2rdma::preload {
namespace {

TEST(SpinBudget, OffAndFixedAreWhatTheRuleSays) {
  SpinBudget b;
  EXPECT_EQ(b.next_us(0, true), 0);
  EXPECT_EQ(b.next_us(0, false), 0);
  EXPECT_EQ(b.next_us(250, false), 250);
  b.ran_out();
  b.ran_out();
  EXPECT_EQ(b.next_us(250, false), 250);  // a fixed spin never shrinks
}

TEST(SpinBudget, AdaptiveStartsWholeAndHalvesToNothing) {
  SpinBudget b;
  EXPECT_EQ(b.next_us(1000, true), 1000);
  b.ran_out();
  EXPECT_EQ(b.next_us(1000, true), 500);
  for (int i = 0; i < 6; ++i) b.ran_out();
  EXPECT_EQ(b.next_us(1000, true), 0);  // below the least spin worth starting: none
}

TEST(SpinBudget, ASpinThatCatchesGrowsBackToTheRule) {
  SpinBudget b;
  b.next_us(1000, true);
  b.ran_out();
  b.ran_out();
  EXPECT_EQ(b.next_us(1000, true), 250);
  b.caught();
  EXPECT_EQ(b.next_us(1000, true), 500);
  b.caught();
  b.caught();
  EXPECT_EQ(b.next_us(1000, true), 1000);
}

TEST(SpinBudget, AQuickWakeupStartsTheSpinAgainASlowOneDoesNot) {
  SpinBudget b;
  b.next_us(100000, true);  // 100 ms: a quarter is 25 ms, far above a short sleep's wakeup
  for (int i = 0; i < 20; ++i) b.ran_out();
  ASSERT_EQ(b.next_us(100000, true), 0);
  b.sleeping();
  b.woke(false);  // nothing of ours: no news about how soon messages come
  EXPECT_EQ(b.next_us(100000, true), 0);
  b.sleeping();
  b.woke(true);
  int again = b.next_us(100000, true);
  EXPECT_GE(again, SpinBudget::kLeastUs);
  EXPECT_LE(again, 50000);

  SpinBudget slow;
  slow.next_us(1000, true);
  for (int i = 0; i < 20; ++i) slow.ran_out();
  slow.sleeping();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past a quarter of 1 ms
  slow.woke(true);
  EXPECT_EQ(slow.next_us(1000, true), 0);
}

// A spin that quick wakeups start again and that never catches (threads of one link waking each other
// with news) starts again ever more rarely; a catch makes it start at the next quick wakeup again.
TEST(SpinBudget, AStartThatComesToNothingMakesTheNextWaitForTwiceAsManyQuickWakeups) {
  SpinBudget b;
  b.next_us(100000, true);
  for (int i = 0; i < 20; ++i) b.ran_out();
  ASSERT_EQ(b.next_us(100000, true), 0);
  // Quick wakeups until the spin starts; then it runs out down to none. Returns the wakeups it took.
  auto start_and_miss = [&b] {
    int wakeups = 0;
    for (;;) {
      b.sleeping();
      b.woke(true);
      ++wakeups;
      if (b.next_us(100000, true) > 0) break;
    }
    for (int i = 0; i < 20 && b.next_us(100000, true) > 0; ++i) b.ran_out();
    return wakeups;
  };
  EXPECT_EQ(start_and_miss(), 1);
  EXPECT_EQ(start_and_miss(), 2);
  EXPECT_EQ(start_and_miss(), 4);
  EXPECT_EQ(start_and_miss(), 8);
  for (int i = 0; i < 10; ++i) start_and_miss();
  EXPECT_EQ(start_and_miss(), 1024);  // at most 1023 let pass
  // A catch: the next quick wakeup starts it.
  b.sleeping();
  for (int i = 0; i < 1024; ++i) b.woke(true);
  ASSERT_GT(b.next_us(100000, true), 0);
  b.caught();
  for (int i = 0; i < 20; ++i) b.ran_out();
  ASSERT_EQ(b.next_us(100000, true), 0);
  EXPECT_EQ(start_and_miss(), 1);
}

// A catch that cost as many system calls as a sleep (three: the arming, the sleep, the event's read)
// shrinks the spin as one that ran out does; one that cost fewer (a NIC's spin makes none) grows it.
TEST(SpinBudget, ALateCatchShrinksTheSpin) {
  SpinBudget b;
  EXPECT_EQ(b.next_us(1000, true), 1000);
  b.caught(10);
  EXPECT_EQ(b.next_us(1000, true), 500);
  b.caught(2);
  EXPECT_EQ(b.next_us(1000, true), 1000);
  b.caught(3);
  EXPECT_EQ(b.next_us(1000, true), 500);
  b.caught(0);
  EXPECT_EQ(b.next_us(1000, true), 1000);
}

}  // namespace
}  // namespace tcp2rdma::preload
