// The ring a stream gets under RLIMIT_MEMLOCK (transport/pin_budget.h): pure arithmetic.
#include "pin_budget.h"

#include <gtest/gtest.h>

namespace tcp2rdma::transport {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

PinState limited(uint64_t limit, uint64_t pinned = 0) { return PinState{true, limit, pinned}; }

uint64_t cost(uint32_t ring_log2, uint32_t peer_log2, uint64_t fixed) {
  return (uint64_t{1} << ring_log2) + (uint64_t{1} << (peer_log2 != 0 ? peer_log2 : ring_log2)) + fixed;
}

TEST(PinBudget, UnlimitedKeepsTheRingAsked) {
  EXPECT_EQ(ring_log2_within(20, 0, stream_fixed_pin(320), PinState{}), 20u);
  EXPECT_EQ(ring_log2_within(29, 22, stream_fixed_pin(320), PinState{}), 29u);
}

TEST(PinBudget, GrowthLeavesAQuarterOfTheLimitForFirstRings) {
  EXPECT_EQ(growth_log2_within(20, PinState{}), 20u);  // nothing bounds it
  // A 256 MiB limit: growth may pin up to three quarters (192 MiB), a 64th (4 MiB) at a time.
  EXPECT_EQ(growth_log2_within(20, limited(256 * kMiB, 100 * kMiB)), 20u);
  EXPECT_EQ(growth_log2_within(20, limited(256 * kMiB, 191 * kMiB)), 20u);       // 1 MiB left: fits
  EXPECT_EQ(growth_log2_within(20, limited(256 * kMiB, 191 * kMiB + kKiB)), 19u);  // half of it
  EXPECT_EQ(growth_log2_within(20, limited(256 * kMiB, 192 * kMiB)), 0u);        // the quarter is kept
  // Where a first ring (which keeps only a sixteenth free) still fits.
  EXPECT_GT(ring_log2_within(16, 16, stream_fixed_pin(320), limited(256 * kMiB, 200 * kMiB)), 0u);
  EXPECT_EQ(growth_log2_within(23, limited(256 * kMiB)), 22u);  // never more than a 64th
}

TEST(PinBudget, FixedCostIsTheMailboxPageAndTheSlots) {
  EXPECT_EQ(stream_fixed_pin(320), 4096u + 32768u);  // 320 slots of 96 bytes: 7.5 pages, 8
  EXPECT_EQ(stream_fixed_pin(65), 4096u + 8192u);    // 6240 bytes: 2 pages
}

TEST(PinBudget, DebiansDefaultLimitGivesEachStreamASixtyFourthAtMost) {
  uint64_t fixed = stream_fixed_pin(320);
  uint32_t r = ring_log2_within(20, 0, fixed, limited(8 * kMiB));
  EXPECT_EQ(r, 15u);  // 32 KiB: 88 KiB of the 128 KiB share; 64 KiB would cost 152 KiB
  EXPECT_LE(cost(r, 0, fixed), 8 * kMiB / 64);
  EXPECT_GT(cost(r + 1, 0, fixed), 8 * kMiB / 64);
}

TEST(PinBudget, SixtyFourStreamsFitInEightMebibytes) {
  // One after the other, each counted as pinned once made: the links' target for an unprivileged
  // user (docs/links.md), with room to spare.
  uint64_t fixed = stream_fixed_pin(320);
  PinState state = limited(8 * kMiB);
  int made = 0;
  while (uint32_t r = ring_log2_within(20, 0, fixed, state)) {
    state.pinned += cost(r, 0, fixed);
    ++made;
    ASSERT_LT(made, 10000);
  }
  EXPECT_GE(made, 64);
  EXPECT_LE(state.pinned, 8 * kMiB - 8 * kMiB / 16);  // a sixteenth is always left free
}

TEST(PinBudget, ACrowdedProcessStartsGrowingRingsAt8KiB) {
  // Below an eighth of the limit pinned, a first ring is what the rule says; from there on, 8 KiB.
  EXPECT_EQ(crowded_first_ring_log2(16, PinState{}), 16u);  // nothing bounds it: never crowded
  EXPECT_EQ(crowded_first_ring_log2(16, limited(256 * kMiB, 32 * kMiB - 1)), 16u);
  EXPECT_EQ(crowded_first_ring_log2(16, limited(256 * kMiB, 32 * kMiB)), kCrowdRingLog2);
  EXPECT_EQ(crowded_first_ring_log2(12, limited(256 * kMiB, 200 * kMiB)), 12u);  // never larger than asked
}

TEST(PinBudget, LinksKeepSparesOnlyWhileTheProcessIsNotCrowded) {
  // A link's pool keeps finished channels' memory on the same line as crowding: below an eighth of
  // the limit pinned, and never in a crowded process, whose next rings need the room.
  EXPECT_TRUE(spares_welcome(PinState{}));
  EXPECT_TRUE(spares_welcome(limited(8 * kMiB, kMiB - 1)));
  EXPECT_FALSE(spares_welcome(limited(8 * kMiB, kMiB)));
  EXPECT_FALSE(spares_welcome(limited(8 * kMiB, 8 * kMiB)));
}

TEST(PinBudget, TenThousandGrowingStreamsFitInAGibibyteMachine) {
  // The links' target: 10 000 connections in a 1 GiB machine (the limit is a quarter: 256 MiB) with
  // the default rule (rings start at 64 KiB and grow), each stream a channel of a link: its ring,
  // the mailbox page after it and the peer's ring mirrored, as large (the outgoing slots are the
  // link's). Without crowding the first rings refuse the last few thousand.
  auto fill = [](bool crowding) {
    PinState state = limited(256 * kMiB);
    int made = 0;
    while (made < 10000) {
      uint32_t first = crowding ? crowded_first_ring_log2(16, state) : 16;
      uint32_t r = ring_log2_within(first, first, stream_fixed_pin(272), state);
      if (r == 0) break;
      state.pinned += 2 * (uint64_t{1} << r) + 4096;
      ++made;
    }
    return made;
  };
  EXPECT_EQ(fill(true), 10000);
  EXPECT_LT(fill(false), 3000);
}

TEST(PinBudget, TheSmallestRingMayTakeMoreThanAShare) {
  // 1 MiB: a share is 16 KiB, less than even the smallest stream; it is made while the limit holds it.
  uint64_t fixed = stream_fixed_pin(320);
  EXPECT_EQ(ring_log2_within(20, 0, fixed, limited(1 * kMiB)), kSmallestBudgetRingLog2);
  EXPECT_EQ(ring_log2_within(20, 0, fixed, limited(1 * kMiB, 1 * kMiB - 80 * kKiB)), 0u);
}

TEST(PinBudget, NothingFitsWhenTheLimitIsSpent) {
  uint64_t fixed = stream_fixed_pin(320);
  EXPECT_EQ(ring_log2_within(20, 0, fixed, limited(8 * kMiB, 8 * kMiB)), 0u);
  EXPECT_EQ(ring_log2_within(20, 0, fixed, limited(8 * kMiB, 20 * kMiB)), 0u);  // no wraparound
  EXPECT_EQ(ring_log2_within(20, 0, fixed, limited(40 * kKiB)), 0u);
}

TEST(PinBudget, AKnownPeerRingIsMirroredWhateverOursIs) {
  // A server facing a client with a 1 MiB ring mirrors 1 MiB: under 8 MiB only the smallest ring of its
  // own goes with it, and once less than that mirror is left, nothing does.
  uint64_t fixed = stream_fixed_pin(320);
  EXPECT_EQ(ring_log2_within(20, 20, fixed, limited(8 * kMiB)), kSmallestBudgetRingLog2);
  EXPECT_EQ(ring_log2_within(20, 20, fixed, limited(8 * kMiB, 6 * kMiB)), kSmallestBudgetRingLog2);
  EXPECT_EQ(ring_log2_within(20, 20, fixed, limited(8 * kMiB, 7 * kMiB)), 0u);  // 512 KiB left
  // A small client ring leaves room for a larger one of ours, within the share.
  uint32_t r = ring_log2_within(20, 14, fixed, limited(8 * kMiB));
  EXPECT_EQ(r, 16u);  // 64 + 16 + 24 = 104 KiB of 128
}

TEST(PinBudget, ASmallWantedRingIsKeptOrRefused) {
  uint64_t fixed = stream_fixed_pin(320);
  EXPECT_EQ(ring_log2_within(12, 0, fixed, limited(8 * kMiB)), 12u);
  EXPECT_EQ(ring_log2_within(12, 0, fixed, limited(8 * kMiB, 8 * kMiB)), 0u);
}

TEST(PinBudget, AClientKeepsItsOptionsWhenTheyFit) {
  uint64_t fixed = stream_fixed_pin(320);
  // Unlimited, or a large machine: its ring, and the server's up to 4 times it.
  RingChoice free_choice = client_rings(20, 22, fixed, PinState{});
  EXPECT_EQ(free_choice.ring_log2, 20u);
  EXPECT_EQ(free_choice.max_peer_log2, 22u);
  RingChoice big = client_rings(20, 22, fixed, limited(6 * 1024 * kMiB));
  EXPECT_EQ(big.ring_log2, 20u);
  EXPECT_EQ(big.max_peer_log2, 22u);
  // 8 MiB: a smaller ring, and the server asked to keep to it.
  RingChoice small = client_rings(20, 22, fixed, limited(8 * kMiB));
  EXPECT_EQ(small.ring_log2, 15u);
  EXPECT_EQ(small.max_peer_log2, 15u);
  // 256 MiB (a quarter of a 1 GiB machine): 1 MiB fits a share, 1 + 4 MiB does not: the server keeps to 1 MiB.
  RingChoice vm = client_rings(20, 22, fixed, limited(256 * kMiB));
  EXPECT_EQ(vm.ring_log2, 20u);
  EXPECT_EQ(vm.max_peer_log2, 20u);
  EXPECT_EQ(client_rings(20, 22, fixed, limited(8 * kMiB, 8 * kMiB)).ring_log2, 0u);
}

TEST(PinBudget, TheMachinesMemoryBoundsWhatIsLeft) {
  // A 1 GiB machine: a quarter (256 MiB) per process, and never more than it has available less an
  // eighth. Streams of 1 MiB rings one after the other: about 110 at 1 MiB, then smaller ones, and
  // never more pinned than the quarter; with the machine short of memory, fewer.
  uint64_t fixed = stream_fixed_pin(320);
  PinState state = limited(256 * kMiB);
  int made = 0, full_size = 0;
  while (uint32_t r = ring_log2_within(20, 0, fixed, state)) {
    full_size += r == 20;
    state.pinned += cost(r, 0, fixed);
    ++made;
    ASSERT_LT(made, 100000);
  }
  EXPECT_GE(full_size, 100);
  EXPECT_GT(made, full_size);
  EXPECT_LE(state.pinned, 256 * kMiB);
  PinState short_of_memory = limited(256 * kMiB);
  short_of_memory.available = 3 * kMiB;
  EXPECT_EQ(ring_log2_within(20, 0, fixed, short_of_memory), 20u);  // 2.1 MiB fits 3
  short_of_memory.available = 1 * kMiB;
  EXPECT_EQ(ring_log2_within(20, 0, fixed, short_of_memory), 18u);  // 256 KiB: 536 KiB of the 1 MiB
  short_of_memory.available = 70 * kKiB;
  EXPECT_EQ(ring_log2_within(20, 0, fixed, short_of_memory), kSmallestBudgetRingLog2);  // 68 KiB
  short_of_memory.available = 40 * kKiB;
  EXPECT_EQ(ring_log2_within(20, 0, fixed, short_of_memory), 0u);
}

TEST(PinBudget, TheReservationOfThisProcessIsItsOwn) {
  // The host test runs with whatever limit and memory it has: a reservation gives a ring it can name
  // and releases what it took; a second one at the same time sees the first's.
  uint64_t fixed = stream_fixed_pin(320);
  uint32_t a = 0, b = 0;
  {
    PinReservation first = PinReservation::for_client(20, 22, fixed);
    PinReservation second = PinReservation::for_client(20, 22, fixed);
    a = first.choice().ring_log2;
    b = second.choice().ring_log2;
    EXPECT_LE(a, 20u);
    EXPECT_LE(b, a);
    EXPECT_LE(first.choice().max_peer_log2, 22u);
  }
  PinReservation third = PinReservation::for_client(20, 22, fixed);
  EXPECT_EQ(third.choice().ring_log2, a);  // the first two released theirs
  // A reservation shrunk to nothing leaves the next choice as if it were not there.
  uint32_t alone = 0;
  {
    PinReservation shrunk = PinReservation::for_client(20, 22, fixed);
    shrunk.shrink_to(0);
    alone = PinReservation::for_client(20, 22, fixed).choice().ring_log2;
  }
  EXPECT_EQ(alone, b);  // what the second got beside one other reservation: third's
  PinReservation server(20, 18, fixed);
  EXPECT_EQ(server.choice().max_peer_log2, 18u);  // the client's ring, as it is
}

}  // namespace
}  // namespace tcp2rdma::transport
