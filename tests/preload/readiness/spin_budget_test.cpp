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

}  // namespace
}  // namespace tcp2rdma::preload
