// How many connections a pinning limit holds, counted as the transport sizes rings (pin_budget.h).
#include "doctor/memlock_budget.h"

#include <gtest/gtest.h>

#include "pin_budget.h"

namespace tcp2rdma::tools::doctor {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kMailboxes = 32 * kKiB;  // stream_fixed_pin(272): a page and 272 slots of 96 bytes

MemlockFacts unprivileged(uint64_t rlimit, uint64_t mem_total = 0) { return MemlockFacts{rlimit, false, mem_total}; }

TEST(DoctorMemlock, TheLimitIsTheRlimitUnlessTheCapabilityLiftsItAndAQuarterOfMemoryAtMost) {
  EXPECT_EQ(pin_limit(unprivileged(8 * kMiB)), 8 * kMiB);
  EXPECT_EQ(pin_limit(unprivileged(8 * kMiB, 16 * kMiB)), 4 * kMiB);
  EXPECT_EQ(pin_limit(MemlockFacts{8 * kMiB, true, 2048 * kMiB}), 512 * kMiB);
  EXPECT_EQ(pin_limit(MemlockFacts{std::nullopt, false, 2048 * kMiB}), 512 * kMiB);
  EXPECT_EQ(pin_limit(MemlockFacts{std::nullopt, false, 0}), std::nullopt);
  EXPECT_EQ(pin_limit(MemlockFacts{8 * kMiB, true, 0}), std::nullopt);
}

TEST(DoctorMemlock, RingsStartAtSixtyFourKibibytesOrTheRulesSmallerSize) {
  EXPECT_EQ(ring_log2_of(1 * kMiB), 20u);
  EXPECT_EQ(ring_log2_of(1 * kMiB + 1), 21u);  // the module rounds up
  EXPECT_EQ(ring_log2_of(100), 10u);
  RingPlan none = ring_plan(0);
  EXPECT_EQ(none.start_log2, 16u);
  EXPECT_EQ(none.grown_log2, 0u);
  RingPlan big = ring_plan(4 * kMiB);
  EXPECT_EQ(big.start_log2, 16u);
  EXPECT_EQ(big.grown_log2, 22u);
  RingPlan small = ring_plan(16 * kKiB);
  EXPECT_EQ(small.start_log2, 14u);
  EXPECT_EQ(small.grown_log2, 14u);
}

TEST(DoctorMemlock, DebiansDefaultHoldsEightyConnections) {
  // 8 MiB less the sixteenth kept free: 7.5 MiB. A first ring may take a 64th (128 KiB), so 32 KiB
  // rings (32 + 32 + 32 KiB = 96 KiB): 80 of them, and nothing is left.
  FirstRings fit = first_rings_within(8 * kMiB, 16);
  EXPECT_EQ(fit.ring_log2, 15u);
  EXPECT_EQ(fit.per_connection, 64 * kKiB + kMailboxes);
  EXPECT_EQ(fit.connections, 80u);
  EXPECT_FALSE(fit.capped);
}

TEST(DoctorMemlock, RingsThatGrowStartAtEightKibibytesOnceAnEighthIsPinned) {
  // The module's rings grow (64 KiB to 1 MiB by default): after 1 MiB of the 8 MiB is pinned (eleven
  // connections of 96 KiB), later connections start at 8 KiB (16 + 32 KiB with the mailboxes).
  FirstRings fit = first_rings_within(8 * kMiB, 16, true);
  EXPECT_EQ(fit.ring_log2, 15u);
  EXPECT_EQ(fit.last_ring_log2, tcp2rdma::transport::kCrowdRingLog2);
  EXPECT_GT(fit.connections, 140u);
  EXPECT_LT(fit.connections, 150u);
}

TEST(DoctorMemlock, ALargeLimitGivesEveryConnectionItsSixtyFourKibibyteRing) {
  // 512 MiB * 15/16 over 64 + 64 + 32 KiB: 3072, and nothing left.
  FirstRings fit = first_rings_within(512 * kMiB, 16);
  EXPECT_EQ(fit.ring_log2, 16u);
  EXPECT_EQ(fit.per_connection, 128 * kKiB + kMailboxes);
  EXPECT_EQ(fit.connections, 3072u);
}

TEST(DoctorMemlock, ALimitBelowTheSmallestConnectionHoldsNone) {
  EXPECT_EQ(first_rings_within(64 * kKiB, 16).connections, 0u);  // `ulimit -l 64`
  EXPECT_EQ(first_rings_within(512 * kKiB, 16).connections, 7u);  // 480 KiB over 64 KiB
}

TEST(DoctorMemlock, GrowthIsBoundByASixtyFourthAndLeavesAQuarter) {
  // 8 MiB: a grown ring may take 128 KiB, far from a 4 MiB rule.
  GrownRings small = grown_rings_within(8 * kMiB, 22, 16);
  EXPECT_EQ(small.largest_log2, 17u);
  EXPECT_EQ(small.connections, 0u);
  // 256 MiB: rings of 1 MiB grow while three quarters (192 MiB) leave room for one more: each grown
  // connection pins 1 MiB + its 64 KiB mirror + 32 KiB, and the 175th still finds 1 MiB.
  GrownRings large = grown_rings_within(256 * kMiB, 20, 16);
  EXPECT_EQ(large.largest_log2, 20u);
  EXPECT_EQ(large.connections, 175u);
}

TEST(DoctorMemlock, FewerThanEightConnectionsFailWithTheFix) {
  Check c = judge_memlock(unprivileged(64 * kKiB), RingPlan{});
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_EQ(c.name, "memlock");
  EXPECT_NE(c.finding.find("RLIMIT_MEMLOCK 64 KiB, no CAP_IPC_LOCK"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("not one connection fits"), std::string::npos) << c.finding;
  EXPECT_NE(c.fix.find("ulimit -l"), std::string::npos);
  EXPECT_NE(c.fix.find("limits.conf"), std::string::npos);
  EXPECT_NE(c.fix.find("CAP_IPC_LOCK"), std::string::npos);
  Check seven = judge_memlock(unprivileged(512 * kKiB), RingPlan{});
  EXPECT_EQ(seven.verdict, Verdict::kFail);
  EXPECT_NE(seven.finding.find("about 7 connections"), std::string::npos) << seven.finding;
}

TEST(DoctorMemlock, FewerThanSixtyFourWarn) {
  // 2 MiB: a 64th is 32 KiB, below the smallest pair of rings, so each takes 16 KiB rings (16 + 16 + 32 KiB): 30.
  Check c = judge_memlock(unprivileged(2 * kMiB), RingPlan{});
  EXPECT_EQ(c.verdict, Verdict::kWarn) << c.finding;
  EXPECT_NE(c.finding.find("about 30 connections"), std::string::npos) << c.finding;
  EXPECT_EQ(judge_memlock(unprivileged(8 * kMiB), RingPlan{}).verdict, Verdict::kOk);
}

TEST(DoctorMemlock, TheCapabilitySaysTheMemoryIsTheBound) {
  Check c = judge_memlock(MemlockFacts{8 * kMiB, true, 2048 * kMiB}, RingPlan{});
  EXPECT_EQ(c.verdict, Verdict::kOk);
  EXPECT_NE(c.finding.find("CAP_IPC_LOCK (lifts RLIMIT_MEMLOCK 8 MiB)"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("a quarter of the memory, 512 MiB"), std::string::npos) << c.finding;
  EXPECT_NE(c.finding.find("about 3072 connections"), std::string::npos) << c.finding;
}

TEST(DoctorMemlock, TheRulesGrowthIsStated) {
  Check small = judge_memlock(unprivileged(8 * kMiB), ring_plan(4 * kMiB));
  EXPECT_NE(small.finding.find("rings grow to at most 128 KiB, not to the rules' 4 MiB"), std::string::npos)
      << small.finding;
  Check large = judge_memlock(unprivileged(256 * kMiB), ring_plan(1 * kMiB));
  EXPECT_NE(large.finding.find("175 of them at once could grow their ring to the rules' 1 MiB"), std::string::npos)
      << large.finding;
  // A rule no larger than the first ring has no growth to state.
  EXPECT_EQ(judge_memlock(unprivileged(8 * kMiB), ring_plan(64 * kKiB)).finding.find("grow"), std::string::npos);
}

}  // namespace
}  // namespace tcp2rdma::tools::doctor
