// When a connection back on TCP tries RDMA again (registry/return_plan.h): nothing is due until armed
// and its first wait has passed; exactly one caller of many takes a due attempt; a failed attempt
// doubles the wait up to the longest; done() stops it for good, and a fall after a return starts
// again at the first wait.
#include "registry/return_plan.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tcp2rdma::preload {
namespace {

using Clock = ReturnPlan::Clock;
using std::chrono::milliseconds;

config::ConnectionOptions g_options;
const config::Decision kDecision{nullptr, &g_options};

TEST(ReturnPlan, NothingIsDueUntilArmedAndItsFirstWaitHasPassed) {
  ReturnPlan plan;
  config::Decision taken{};
  auto t0 = Clock::now();
  EXPECT_FALSE(plan.armed());
  EXPECT_FALSE(plan.take_due(t0 + milliseconds(100000), &taken));
  plan.remember(kDecision);
  plan.arm(t0);
  EXPECT_TRUE(plan.armed());
  EXPECT_FALSE(plan.take_due(t0 + ReturnPlan::kFirstWait - milliseconds(1), &taken));
  EXPECT_TRUE(plan.take_due(t0 + ReturnPlan::kFirstWait, &taken));
  EXPECT_EQ(taken.options, &g_options);
  // Under way: not due again until it failed, and still armed (its registrations are kept).
  EXPECT_FALSE(plan.take_due(t0 + milliseconds(100000), &taken));
  EXPECT_TRUE(plan.armed());
}

TEST(ReturnPlan, OneCallerOfManyTakesTheAttempt) {
  ReturnPlan plan;
  plan.remember(kDecision);
  auto t0 = Clock::now();
  plan.arm(t0 - ReturnPlan::kFirstWait);
  std::atomic<int> winners{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      config::Decision taken{};
      if (plan.take_due(Clock::now(), &taken)) ++winners;
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST(ReturnPlan, AFailedAttemptDoublesTheWaitUpToTheLongest) {
  ReturnPlan plan;
  plan.remember(kDecision);
  config::Decision taken{};
  auto now = Clock::now();
  plan.arm(now);
  now += ReturnPlan::kFirstWait;
  uint32_t expected = static_cast<uint32_t>(ReturnPlan::kFirstWait.count());
  for (int attempt = 0; attempt < 10; ++attempt) {
    ASSERT_TRUE(plan.take_due(now, &taken)) << attempt;
    plan.failed(now);
    expected = std::min<uint32_t>(2 * expected, static_cast<uint32_t>(ReturnPlan::kLongestWait.count()));
    EXPECT_EQ(plan.wait_ms(), expected) << attempt;
    EXPECT_FALSE(plan.take_due(now + milliseconds(expected - 1), &taken)) << attempt;
    now += milliseconds(expected);
  }
  EXPECT_EQ(plan.wait_ms(), static_cast<uint32_t>(ReturnPlan::kLongestWait.count()));
  // Not started (the peer's bytes still to read first): the same wait again, not a longer one.
  ASSERT_TRUE(plan.take_due(now, &taken));
  plan.failed(now, /*double_wait=*/false);
  EXPECT_EQ(plan.wait_ms(), static_cast<uint32_t>(ReturnPlan::kLongestWait.count()));
}

TEST(ReturnPlan, DoneStopsItAndTheNextFallStartsAtTheFirstWait) {
  ReturnPlan plan;
  plan.remember(kDecision);
  config::Decision taken{};
  auto now = Clock::now();
  plan.arm(now);
  ASSERT_TRUE(plan.take_due(now + ReturnPlan::kFirstWait, &taken));
  plan.failed(now);
  plan.done();  // back on RDMA
  EXPECT_FALSE(plan.armed());
  EXPECT_FALSE(plan.take_due(now + milliseconds(1000000), &taken));
  plan.arm(now);  // it fell again
  EXPECT_EQ(plan.wait_ms(), static_cast<uint32_t>(ReturnPlan::kFirstWait.count()));
  EXPECT_TRUE(plan.take_due(now + ReturnPlan::kFirstWait, &taken));
}

TEST(ReturnPlan, HurryMakesTheAttemptDueAtOnceAndPromptOnlyOnce) {
  ReturnPlan plan;
  plan.remember(kDecision);
  config::Decision taken{};
  bool prompt = false;
  auto now = Clock::now();
  plan.hurry(now);  // nothing planned: nothing to hurry
  EXPECT_FALSE(plan.take_due(now + milliseconds(1000000), &taken, &prompt));
  plan.arm(now);
  plan.hurry(now);  // the cause of the move is gone already
  ASSERT_TRUE(plan.take_due(now, &taken, &prompt));
  EXPECT_TRUE(prompt);
  // A prompt attempt that fails plans the next after the first wait, and that one is not prompt.
  plan.failed(now);
  EXPECT_EQ(plan.wait_ms(), static_cast<uint32_t>(ReturnPlan::kFirstWait.count()));
  EXPECT_FALSE(plan.take_due(now + ReturnPlan::kFirstWait - milliseconds(1), &taken, &prompt));
  ASSERT_TRUE(plan.take_due(now + ReturnPlan::kFirstWait, &taken, &prompt));
  EXPECT_FALSE(prompt);
  // A later fall starts as arm() says, prompt no more.
  plan.done();
  plan.hurry(now);
  plan.arm(now);
  ASSERT_TRUE(plan.take_due(now + ReturnPlan::kFirstWait, &taken, &prompt));
  EXPECT_FALSE(prompt);
}

TEST(ReturnPlan, OnlyAFewPromptAttemptsAWindow) {
  ReturnPlan plan;
  plan.remember(kDecision);
  config::Decision taken{};
  bool prompt = false;
  auto now = Clock::now();
  // A process that moves back and returns again and again (credentials changed around each request).
  for (uint32_t i = 0; i < ReturnPlan::kPromptsAWindow; ++i) {
    plan.arm(now);
    plan.hurry(now);
    ASSERT_TRUE(plan.take_due(now, &taken, &prompt)) << i;
    EXPECT_TRUE(prompt);
    plan.done();
  }
  plan.arm(now);
  plan.hurry(now);
  EXPECT_FALSE(plan.take_due(now, &taken, &prompt)) << "past the window's prompt attempts: as after arm()";
  ASSERT_TRUE(plan.take_due(now + ReturnPlan::kFirstWait, &taken, &prompt));
  EXPECT_FALSE(prompt);
  plan.done();
  // A new window, a prompt attempt again.
  auto later = now + ReturnPlan::kPromptWindow;
  plan.arm(later);
  plan.hurry(later);
  ASSERT_TRUE(plan.take_due(later, &taken, &prompt));
  EXPECT_TRUE(prompt);
}

}  // namespace
}  // namespace tcp2rdma::preload
